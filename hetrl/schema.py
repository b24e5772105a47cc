"""Typed schemas of every config option, registered in Hydra's ConfigStore.

Each YAML option under `conf/<group>/` starts from one of these dataclasses
(`defaults: [/schema/<group>/<name>@_here_]`), so a wrong type or an unknown key fails
while Hydra composes the config. Range checks live in `__post_init__` and run when
`validate()` turns the composed config into these objects, before anything is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping, Optional

from hydra.core.config_store import ConfigStore
from hydra.utils import get_class
from omegaconf import II, MISSING, DictConfig, OmegaConf


class ConfigError(ValueError):
    """A config value is out of range or two choices do not fit together."""


def _require(ok: bool, key: str, value: Any, valid: str) -> None:
    if not ok:
        raise ConfigError(f"{key}={value!r} is invalid: valid values are {valid}")


class ActionSpace(str, Enum):
    discrete = "discrete"
    continuous = "continuous"


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class Noise(str, Enum):
    normal = "normal"
    ornstein_uhlenbeck = "ornstein_uhlenbeck"
    none = "none"


class DType(str, Enum):
    float32 = "float32"
    bfloat16 = "bfloat16"


# ---- env -------------------------------------------------------------------------------


@dataclass
class EnvConfig:
    _target_: str = MISSING
    id: str = MISSING
    action_space: ActionSpace = MISSING
    n_envs: int = 1
    vectorization: str = "sync"  # sync | async (gymnasium's vectorization modes)
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require(self.n_envs >= 1, "env.n_envs", self.n_envs, "integers >= 1")
        _require(self.vectorization in ("sync", "async"), "env.vectorization",
                 self.vectorization, "'sync' or 'async'")


# ---- algo ------------------------------------------------------------------------------


@dataclass
class AlgoConfig:
    """Hyperparameters every algorithm shares (names as in SB3 / rl-zoo3)."""

    _target_: str = MISSING
    batch_size: int = 256
    hidden: list[int] = field(default_factory=lambda: [256, 256])
    lr: float = 1e-3
    gamma: float = 0.99
    buffer_size: int = 1_000_000
    learning_starts: int = 100
    train_freq: int = 1
    gradient_steps: int = 1

    def __post_init__(self) -> None:
        _require(self.batch_size >= 1, "algo.batch_size", self.batch_size, "integers >= 1")
        _require(
            len(self.hidden) > 0 and all(h >= 1 for h in self.hidden),
            "algo.hidden", list(self.hidden), "a non-empty list of widths >= 1",
        )
        _require(self.lr > 0, "algo.lr", self.lr, "floats > 0")
        _require(0 <= self.gamma <= 1, "algo.gamma", self.gamma, "floats in [0, 1]")
        _require(
            self.buffer_size >= self.batch_size, "algo.buffer_size", self.buffer_size,
            f"integers >= algo.batch_size ({self.batch_size})",
        )
        _require(self.learning_starts >= 0, "algo.learning_starts", self.learning_starts,
                 "integers >= 0")
        _require(self.train_freq >= 1, "algo.train_freq", self.train_freq, "integers >= 1")
        _require(self.gradient_steps >= 0, "algo.gradient_steps", self.gradient_steps,
                 "integers >= 0")


@dataclass
class DQNConfig(AlgoConfig):
    _target_: str = MISSING
    double_dqn: bool = False
    target_update_interval: int = 1000  # in gradient updates
    exploration_fraction: float = 0.1
    exploration_initial_eps: float = 1.0
    exploration_final_eps: float = 0.05
    max_grad_norm: float = 10.0
    total_steps: int = II("steps")

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.target_update_interval >= 1, "algo.target_update_interval",
                 self.target_update_interval, "integers >= 1")
        for key in ("exploration_fraction", "exploration_initial_eps", "exploration_final_eps"):
            value = getattr(self, key)
            _require(0 <= value <= 1, f"algo.{key}", value, "floats in [0, 1]")


@dataclass
class DDPGConfig(AlgoConfig):
    _target_: str = MISSING
    tau: float = 0.005
    action_noise: Noise = Noise.normal
    noise_std: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(0 < self.tau <= 1, "algo.tau", self.tau, "floats in (0, 1]")
        _require(self.noise_std >= 0, "algo.noise_std", self.noise_std, "floats >= 0")


@dataclass
class TD3Config(DDPGConfig):
    _target_: str = MISSING
    policy_delay: int = 2
    target_noise: float = 0.2
    target_noise_clip: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.policy_delay >= 1, "algo.policy_delay", self.policy_delay, "integers >= 1")


# ---- platform, precision, scheduler, replay, tracking --------------------------------


@dataclass
class HostPlatformConfig:
    _target_: str = MISSING
    device: Device = II("device")
    threads: Optional[int] = None  # torch intra-op threads; null keeps torch's default

    def __post_init__(self) -> None:
        _require(self.threads is None or self.threads >= 1, "platform.threads", self.threads,
                 "null or integers >= 1")


@dataclass
class UniformPrecisionConfig:
    _target_: str = MISSING
    dtype: DType = DType.float32


@dataclass
class SyncSchedulerConfig:
    _target_: str = MISSING


@dataclass
class UniformReplayConfig:
    _target_: str = MISSING
    capacity: int = II("algo.buffer_size")


@dataclass
class MlflowTrackingConfig:
    _target_: str = MISSING
    uri: str = "sqlite:///runs/mlflow.db"
    experiment: str = "hetrl"
    # set by the sweep callback for the jobs of a multirun
    parent_run_id: Optional[str] = II("oc.env:HETRL_PARENT_RUN_ID,null")


@dataclass
class NullTrackingConfig:
    _target_: str = MISSING
    uri: Optional[str] = None
    experiment: Optional[str] = None


# ---- the run ---------------------------------------------------------------------------


@dataclass
class RunConfig:
    env: Any = MISSING
    algo: Any = MISSING
    platform: Any = MISSING
    precision: Any = MISSING
    scheduler: Any = MISSING
    replay: Any = MISSING
    tracking: Any = MISSING
    seed: int = 0
    steps: int = 50_000
    device: Device = Device.auto
    checkpoint_every: int = 0
    resume: Optional[str] = None
    log_every: int = 1000

    def __post_init__(self) -> None:
        _require(self.steps >= 1, "steps", self.steps, "integers >= 1")
        _require(self.seed >= 0, "seed", self.seed, "integers >= 0")
        _require(self.checkpoint_every >= 0, "checkpoint_every", self.checkpoint_every,
                 "integers >= 0 (0: checkpoint only at the end)")
        _require(self.log_every >= 1, "log_every", self.log_every, "integers >= 1")


SCHEMAS: dict[str, dict[str, type]] = {
    "env": {"gymnasium": EnvConfig},
    "algo": {"dqn": DQNConfig, "ddpg": DDPGConfig, "td3": TD3Config},
    "platform": {"host": HostPlatformConfig},
    "precision": {"uniform": UniformPrecisionConfig},
    "scheduler": {"sync": SyncSchedulerConfig},
    "replay": {"uniform": UniformReplayConfig},
    "tracking": {"mlflow": MlflowTrackingConfig, "none": NullTrackingConfig},
}


def register() -> None:
    """Put every schema in Hydra's ConfigStore (`schema/<group>/<name>`, and `run_schema`)."""
    store = ConfigStore.instance()
    store.store(name="run_schema", node=RunConfig)
    for group, schemas in SCHEMAS.items():
        for name, node in schemas.items():
            store.store(group=f"schema/{group}", name=name, node=node)


def validate(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """Run every schema's range checks and the cross-group checks; raise ConfigError.

    `choices` maps each config group to the chosen option's name (Hydra's runtime choices).
    """
    OmegaConf.to_object(cfg)  # builds each dataclass, which runs its __post_init__
    _check_algo_fits_env(cfg, choices)


def _check_algo_fits_env(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    from hetrl.options import algos_for, envs_for  # options reads the conf tree: import late

    needs = get_class(cfg.algo._target_).action_space
    has = ActionSpace(cfg.env.action_space)
    if needs != has:
        raise ConfigError(
            f"algo={choices['algo']} needs a {needs.value} action space, but "
            f"env={choices['env']} ({cfg.env.id}) has a {has.value} one: "
            f"choose env from {envs_for(needs)} or algo from {algos_for(has)}"
        )
