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

from hetrl.partition.graph import Kind


class ConfigError(ValueError):
    """A config value is out of range or two choices do not fit together."""


def _require(ok: bool, key: str, value: Any, valid: str) -> None:
    if not ok:
        raise ConfigError(f"{key}={value!r} is invalid: valid values are {valid}")


class ActionSpace(str, Enum):
    discrete = "discrete"
    continuous = "continuous"


class Agents(str, Enum):
    """How many agents an env has, so that single- and multi-agent learners are matched."""

    single = "single"
    multi = "multi"


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
    float16 = "float16"


class ActorPrecision(str, Enum):
    """The inference precision `q` of a policy copy (QuaRL's PTQ, ActorQ's actors)."""

    fp32 = "fp32"
    fp16 = "fp16"
    int8 = "int8"


class Int8Mode(str, Enum):
    """How int8 is computed.

    `paper`: QuaRL's quantizer exactly as printed (delta over 2^n, no zero-point, no clamp),
    as fake quant in float on weights and activations: the reward-error study.
    `kernel`: standard clamped int8 (symmetric weights, affine activations) run by real
    int8 kernels (PyTorch's dynamically quantized Linear/Conv): the speed study.
    """

    paper = "paper"
    kernel = "kernel"


# ---- env -------------------------------------------------------------------------------


@dataclass
class EnvConfig:
    _target_: str = MISSING
    id: str = MISSING
    action_space: ActionSpace = MISSING
    n_envs: int = 1
    # gymnasium's vectorization modes: sync | async | vector_entry_point (the env's own
    # batched implementation, e.g. ale-py's AtariVectorEnv)
    vectorization: str = "sync"
    clip_rewards: bool = False  # the learner sees sign-clipped rewards; returns stay the score
    flatten_observation: bool = False  # Dict observations (DM Control) -> one flat Box
    kwargs: dict[str, Any] = field(default_factory=dict)
    agents: Agents = Agents.single

    def __post_init__(self) -> None:
        _require(self.n_envs >= 1, "env.n_envs", self.n_envs, "integers >= 1")
        modes = ("sync", "async", "vector_entry_point")
        _require(self.vectorization in modes, "env.vectorization", self.vectorization,
                 ", ".join(repr(m) for m in modes))


class ReturnDefinition(str, Enum):
    """What `return_mean_100` means in a multi-agent env (peers disagree on it)."""

    team_sum = "team_sum"  # the sum over agents of each agent's episode return
    agent_mean = "agent_mean"  # the mean over agents of each agent's episode return


@dataclass
class MpeEnvConfig:
    """A PettingZoo MPE env of mpe2 (`id` names its module, e.g. simple_tag_v3).

    `n_agents` counts the learning agents as the MARL paper names its configs: predators in
    simple_tag (prey and obstacles follow as max(1, n/3) and max(2, n/3), extract E.2),
    agents (and as many landmarks) in simple_spread. Every agent, prey included, is trained.
    """

    _target_: str = MISSING
    id: str = MISSING
    action_space: ActionSpace = ActionSpace.discrete
    agents: Agents = Agents.multi
    n_agents: int = 3
    n_envs: int = 1
    max_cycles: int = 25  # episode length
    returns: ReturnDefinition = ReturnDefinition.team_sum
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require(self.n_agents >= 1, "env.n_agents", self.n_agents, "integers >= 1")
        _require(self.n_envs >= 1, "env.n_envs", self.n_envs, "integers >= 1")
        _require(self.max_cycles >= 1, "env.max_cycles", self.max_cycles, "integers >= 1")
        _require(self.action_space == ActionSpace.discrete, "env.action_space",
                 self.action_space.value, "'discrete' (MPE's 5 moves)")
        _require(self.agents == Agents.multi, "env.agents", self.agents.value, "'multi'")


# ---- algo ------------------------------------------------------------------------------


def _check_widths(hidden: list[int], policy_hidden: Optional[list[int]]) -> None:
    for key, widths in (("algo.hidden", hidden), ("algo.policy_hidden", policy_hidden)):
        if widths is not None:
            _require(len(widths) > 0 and all(h >= 1 for h in widths), key, list(widths),
                     "a non-empty list of widths >= 1" + (" or null" if "policy" in key else ""))


@dataclass
class AlgoConfig:
    """Hyperparameters every algorithm shares (names as in SB3 / rl-zoo3)."""

    _target_: str = MISSING
    batch_size: int = 256
    hidden: list[int] = field(default_factory=lambda: [256, 256])
    # the policy network's widths (DQN: the Q-network), when they differ from `hidden`
    # (QuaRL's ActorQ: policy [2048, 2048, 2048], critic [512, 512, 512]); null: `hidden`
    policy_hidden: Optional[list[int]] = None
    lr: float = 1e-3
    gamma: float = 0.99
    buffer_size: int = 1_000_000
    learning_starts: int = 100
    train_freq: int = 1
    gradient_steps: int = 1

    def __post_init__(self) -> None:
        _require(self.batch_size >= 1, "algo.batch_size", self.batch_size, "integers >= 1")
        _check_widths(self.hidden, self.policy_hidden)
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


@dataclass
class MADDPGConfig(AlgoConfig):
    """MADDPG with the MARL paper's settings (extract B.3): `train_freq` env steps between
    update rounds, `gradient_steps` rounds each, a round updating every agent's trainer once
    on its own mini-batch; updates start at batch × episode length stored transitions."""

    _target_: str = MISSING
    batch_size: int = 1024
    hidden: list[int] = field(default_factory=lambda: [64, 64])
    lr: float = 0.01
    gamma: float = 0.95
    learning_starts: int = 25_600
    train_freq: int = 100
    tau: float = 0.01
    max_grad_norm: float = 0.5
    policy_reg: float = 1e-3  # weight of mean(logits²) in the actor loss (openai/maddpg)

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(0 < self.tau <= 1, "algo.tau", self.tau, "floats in (0, 1]")
        _require(self.max_grad_norm > 0, "algo.max_grad_norm", self.max_grad_norm, "floats > 0")
        _require(self.policy_reg >= 0, "algo.policy_reg", self.policy_reg, "floats >= 0")


@dataclass
class MATD3Config(MADDPGConfig):
    """MADDPG plus twin critics, target smoothing (on the target's soft actions) and delayed
    actor and target updates."""

    _target_: str = MISSING
    policy_delay: int = 2
    target_noise: float = 0.2
    target_noise_clip: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.policy_delay >= 1, "algo.policy_delay", self.policy_delay, "integers >= 1")
        _require(self.target_noise >= 0, "algo.target_noise", self.target_noise, "floats >= 0")


@dataclass
class D4PGConfig(DDPGConfig):
    _target_: str = MISSING
    v_min: float = -150.0
    v_max: float = 150.0
    atoms: int = 51
    n_step: int = 5

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.v_max > self.v_min, "algo.v_max", self.v_max,
                 f"floats > algo.v_min ({self.v_min})")
        _require(self.atoms >= 2, "algo.atoms", self.atoms, "integers >= 2")
        _require(self.n_step >= 1, "algo.n_step", self.n_step, "integers >= 1")


@dataclass
class A2CConfig:
    """On-policy hyperparameters (SB3 names and A2C's defaults), shared by PPO. No replay
    buffer, no learning_starts: each update trains on a fresh rollout of n_steps × n_envs
    transitions (the base Learner's schedule is derived from it, see hetrl.algos.a2c)."""

    _target_: str = MISSING
    hidden: list[int] = field(default_factory=lambda: [64, 64])
    policy_hidden: Optional[list[int]] = None  # as AlgoConfig's
    lr: float = 7e-4
    gamma: float = 0.99
    n_steps: int = 5  # per env
    gae_lambda: float = 1.0
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    normalize_advantage: bool = False
    n_envs: int = II("env.n_envs")

    def __post_init__(self) -> None:
        _check_widths(self.hidden, self.policy_hidden)
        _require(self.lr > 0, "algo.lr", self.lr, "floats > 0")
        _require(0 <= self.gamma <= 1, "algo.gamma", self.gamma, "floats in [0, 1]")
        _require(self.n_steps >= 1, "algo.n_steps", self.n_steps, "integers >= 1")
        _require(0 <= self.gae_lambda <= 1, "algo.gae_lambda", self.gae_lambda,
                 "floats in [0, 1]")
        for key in ("ent_coef", "vf_coef"):
            _require(getattr(self, key) >= 0, f"algo.{key}", getattr(self, key), "floats >= 0")
        _require(self.max_grad_norm > 0, "algo.max_grad_norm", self.max_grad_norm, "floats > 0")
        _require(not self.normalize_advantage or self.n_steps * self.n_envs > 1, "algo.n_steps",
                 self.n_steps, "n_steps × env.n_envs > 1 to normalize advantages")


@dataclass
class PPOConfig(A2CConfig):
    """PPO's defaults (SB3); `batch_size` is the minibatch size."""

    _target_: str = MISSING
    lr: float = 3e-4
    n_steps: int = 2048
    gae_lambda: float = 0.95
    normalize_advantage: bool = True
    batch_size: int = 64
    n_epochs: int = 10
    clip_range: float = 0.2

    def __post_init__(self) -> None:
        super().__post_init__()
        rollout = self.n_steps * self.n_envs
        _require(1 <= self.batch_size <= rollout, "algo.batch_size", self.batch_size,
                 f"integers in [1, n_steps × env.n_envs = {rollout}]")
        _require(not self.normalize_advantage or self.batch_size > 1, "algo.batch_size",
                 self.batch_size, "integers > 1 to normalize advantages")
        _require(self.n_epochs >= 1, "algo.n_epochs", self.n_epochs, "integers >= 1")
        _require(self.clip_range > 0, "algo.clip_range", self.clip_range, "floats > 0")


# ---- platform, precision, scheduler, replay, tracking --------------------------------


@dataclass
class HostPlatformConfig:
    _target_: str = MISSING
    device: Device = II("device")
    threads: Optional[int] = None  # torch intra-op threads; null keeps torch's default
    measure_layers: bool = True  # time each node of the step on each device before training

    def __post_init__(self) -> None:
        _check_threads(self.threads)


def _check_threads(threads: Optional[int]) -> None:
    _require(threads is None or threads >= 1, "platform.threads", threads, "null or integers >= 1")


class DeviceKind(str, Enum):
    cpu = "cpu"
    fpga = "fpga"
    aie = "aie"
    gpu = "gpu"
    dsp = "dsp"


@dataclass
class DeviceSpec:
    """One compute unit of a modeled platform (hetrl.platform.model explains the formulas).

    `rates` are *effective* (sustained) FLOP/s per dtype the unit can compute in, natively or
    emulated; `peak` holds raw peaks for reference only. `capacity` names the resources this
    unit owns (names are unique on a platform); `usage[kind][resource]` is what one node of
    that kind placed here takes, from this unit's or another unit's resources (an AIE node
    also takes PL LUTs for its PLIO data movers).
    """

    kind: DeviceKind = MISSING
    rates: dict[DType, float] = MISSING  # FLOP/s
    native: list[DType] = MISSING  # dtypes computed without emulation
    peak: dict[DType, float] = field(default_factory=dict)  # FLOP/s, reference only
    mem_bandwidth: float = MISSING  # bytes/s
    launch_s: float = 0.0  # kernel launch / initialization, paid by every node
    runs: list[Kind] = field(default_factory=lambda: list(Kind))  # node kinds it may run
    capacity: dict[str, float] = field(default_factory=dict)
    # dict[str, Any]: OmegaConf rejects ints in a dict of dict of float; checked below
    usage: dict[Kind, dict[str, Any]] = field(default_factory=dict)


@dataclass
class LinkSpec:
    """A symmetric link between two devices of a modeled platform."""

    between: list[str] = MISSING  # two device names
    bandwidth: float = MISSING  # bytes/s
    latency_s: float = 0.0
    runtime_overhead_s: float = 0.0  # host-runtime cost of every transfer (PEARL artifact: 1 ms)
    shared_memory: bool = False  # one address space: a transfer copies nothing and costs 0


@dataclass
class BaselineSpec:
    """A plan to compare with: every node on `device` (nodes it cannot run fall back to their
    fastest device) in `dtype`, the device clocked at `clock` times its modeled rate (a
    slower fabric, e.g. FIXAR's PL at 164 of 245 MHz), with or without fp32 master weights."""

    device: str = MISSING
    dtype: DType = DType.float32
    clock: float = 1.0
    master_weight_sync: bool = True


@dataclass
class ModeledPlatformConfig:
    _target_: str = MISSING
    _convert_: str = "object"  # the model gets DeviceSpec and LinkSpec objects, not dicts
    name: str = MISSING
    device: Device = II("device")  # the torch device the numerics really run on (this host)
    threads: Optional[int] = 1  # torch intra-op threads of those numerics, as platform=host
    host: str = MISSING  # the modeled device that keeps the fp32 master weights
    devices: dict[str, DeviceSpec] = MISSING
    links: list[LinkSpec] = field(default_factory=list)
    # the plans the chosen one is compared with: name -> every node on one device, one dtype
    baselines: dict[str, BaselineSpec] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_threads(self.threads)
        names = sorted(self.devices)
        _require(len(names) > 0, "platform.devices", names, "a non-empty mapping of devices")
        _require(self.host in self.devices, "platform.host", self.host, f"one of {names}")
        owners = [r for spec in self.devices.values() for r in spec.capacity]
        _require(len(owners) == len(set(owners)), "platform.devices.*.capacity", owners,
                 "resource names that are unique across devices")
        for name, spec in self.devices.items():
            _check_device(f"platform.devices.{name}", spec, set(owners))
        pairs: set[frozenset[str]] = set()
        for i, link in enumerate(self.links):
            key = f"platform.links.{i}"
            ends = list(link.between)
            _require(len(ends) == 2 and ends[0] != ends[1] and set(ends) <= set(names),
                     f"{key}.between", ends, f"two different devices of {names}")
            _require(frozenset(ends) not in pairs, f"{key}.between", ends,
                     "a pair of devices not linked already")
            pairs.add(frozenset(ends))
            _require(link.bandwidth > 0, f"{key}.bandwidth", link.bandwidth, "floats > 0 (bytes/s)")
            _require(link.latency_s >= 0, f"{key}.latency_s", link.latency_s, "floats >= 0")
            _require(link.runtime_overhead_s >= 0, f"{key}.runtime_overhead_s",
                     link.runtime_overhead_s, "floats >= 0")
        for name, baseline in self.baselines.items():
            key = f"platform.baselines.{name}"
            _require(baseline.device in self.devices, f"{key}.device", baseline.device,
                     f"one of {names}")
            rates = sorted(d.value for d in self.devices[baseline.device].rates)
            _require(baseline.dtype in self.devices[baseline.device].rates, f"{key}.dtype",
                     baseline.dtype.value, f"dtypes {baseline.device} has a rate for ({rates})")
            _require(baseline.clock > 0, f"{key}.clock", baseline.clock, "floats > 0")
        unreachable = sorted(set(names) - _reachable(self.host, pairs))
        _require(not unreachable, "platform.links", f"no route to {unreachable}",
                 f"links that connect every device to the host {self.host!r}")


def _check_device(key: str, spec: DeviceSpec, resources: set[str]) -> None:
    _require(len(spec.rates) > 0 and all(r > 0 for r in spec.rates.values()), f"{key}.rates",
             dict(spec.rates), "a non-empty mapping of dtype -> FLOP/s > 0")
    _require(set(spec.native) <= set(spec.rates), f"{key}.native", list(spec.native),
             f"dtypes that have a rate ({sorted(d.value for d in spec.rates)})")
    _require(all(p > 0 for p in spec.peak.values()), f"{key}.peak", dict(spec.peak),
             "FLOP/s > 0")
    _require(spec.mem_bandwidth > 0, f"{key}.mem_bandwidth", spec.mem_bandwidth,
             "floats > 0 (bytes/s)")
    _require(spec.launch_s >= 0, f"{key}.launch_s", spec.launch_s, "floats >= 0 (seconds)")
    _require(len(spec.runs) > 0, f"{key}.runs", list(spec.runs),
             f"a non-empty list of {[k.value for k in Kind]}")
    _require(all(c >= 0 for c in spec.capacity.values()), f"{key}.capacity",
             dict(spec.capacity), "amounts >= 0")
    for kind, amounts in spec.usage.items():
        _require(kind in spec.runs, f"{key}.usage", kind.value,
                 f"node kinds the device runs ({[k.value for k in spec.runs]})")
        _require(set(amounts) <= resources
                 and all(isinstance(a, (int, float)) and a >= 0 for a in amounts.values()),
                 f"{key}.usage.{kind.value}", dict(amounts),
                 f"amounts >= 0 of the platform's resources ({sorted(resources)})")


def _reachable(start: str, pairs: set[frozenset[str]]) -> set[str]:
    seen, frontier = {start}, [start]
    while frontier:
        here = frontier.pop()
        for pair in pairs:
            if here in pair:
                (other,) = pair - {here}
                if other not in seen:
                    seen.add(other)
                    frontier.append(other)
    return seen


@dataclass
class LossScalingConfig:
    _target_: str = "hetrl.precision.scaling.LossScaling"
    init_scale: float = 2.0**16
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 200

    def __post_init__(self) -> None:
        _require(self.init_scale > 0, "precision.loss_scaling.init_scale", self.init_scale,
                 "floats > 0")
        _require(self.growth_factor > 1, "precision.loss_scaling.growth_factor",
                 self.growth_factor, "floats > 1")
        _require(0 < self.backoff_factor < 1, "precision.loss_scaling.backoff_factor",
                 self.backoff_factor, "floats in (0, 1)")
        _require(self.growth_interval >= 1, "precision.loss_scaling.growth_interval",
                 self.growth_interval, "integers >= 1")


@dataclass
class UniformPrecisionConfig:
    _target_: str = MISSING
    dtype: DType = DType.float32
    loss_scaling: LossScalingConfig = field(default_factory=LossScalingConfig)


@dataclass
class HardwareAwarePrecisionConfig:
    _target_: str = MISSING
    # each device computes in the first of these dtypes it supports natively
    prefer: list[DType] = field(default_factory=lambda: [DType.bfloat16, DType.float16,
                                                         DType.float32])
    loss_scaling: LossScalingConfig = field(default_factory=LossScalingConfig)

    def __post_init__(self) -> None:
        _require(len(self.prefer) > 0, "precision.prefer", list(self.prefer),
                 "a non-empty list of dtypes")


@dataclass
class QATPrecisionConfig:
    """QuaRL's quantization-aware training (hetrl.precision.qat)."""

    _target_: str = MISSING
    bits: int = 8
    quant_delay: int = 1000  # learner updates before fake quantization starts
    per_channel: bool = True  # one δ per output channel of a convolution weight

    def __post_init__(self) -> None:
        _require(2 <= self.bits <= 16, "precision.bits", self.bits, "integers in [2, 16]")
        _require(self.quant_delay >= 0, "precision.quant_delay", self.quant_delay,
                 "integers >= 0 (learner updates)")


@dataclass
class IlpPartitionerConfig:
    _target_: str = MISSING
    time_limit_s: float = 10.0
    communication: bool = True
    disjunctive: bool = False

    def __post_init__(self) -> None:
        _require(self.time_limit_s > 0, "partitioner.time_limit_s", self.time_limit_s,
                 "floats > 0 (seconds)")


@dataclass
class HeftPartitionerConfig:
    _target_: str = MISSING


@dataclass
class SinglePartitionerConfig:
    _target_: str = MISSING
    device: str = MISSING


@dataclass
class SyncSchedulerConfig:
    _target_: str = MISSING


@dataclass
class OnPolicySchedulerConfig:
    _target_: str = MISSING


@dataclass
class ActorsConfig:
    """Where the actors run and the precision `q` of their policy copy (ActorQ); with the
    sync and on-policy schedulers (`actors=local`) acting stays in the learner's process and
    `precision` is that of the final-policy evaluation (PTQ, `ptq_reward_error_pct`).
    Actor pools (process, ray) subclass this and add their own fields."""

    _target_: str = MISSING
    # strings, not enums, so that a bad value is a ConfigError naming the choices
    precision: str = "fp32"  # fp32 | fp16 | int8
    int8_mode: str = "kernel"  # paper | kernel
    per_channel: bool = True  # one scale per output channel of a convolution
    eval_episodes: int = 20  # episodes of the PTQ evaluation (fp32 and quantized, same seeds)

    def __post_init__(self) -> None:
        _require(self.precision in {p.value for p in ActorPrecision}, "actors.precision",
                 self.precision, str([p.value for p in ActorPrecision]))
        _require(self.int8_mode in {m.value for m in Int8Mode}, "actors.int8_mode",
                 self.int8_mode, str([m.value for m in Int8Mode]))
        _require(self.eval_episodes >= 1, "actors.eval_episodes", self.eval_episodes,
                 "integers >= 1")


@dataclass
class ActorPoolConfig(ActorsConfig):
    """ActorQ's actors (scheduler=actorq): `n` of them, each pulling the policy every
    `pull_every` of its env steps; the weights are quantized on the learner's side before
    they are sent (q_c, a compressed message) or on the actor's side after (q)."""

    _target_: str = MISSING
    n: int = 2
    pull_every: int = 1000  # actor env steps between pulls (QuaRL: 1000, 100, 30)
    quantize_on: str = "learner"  # learner (q_c) | actor (q)

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.n >= 1, "actors.n", self.n, "integers >= 1")
        _require(self.pull_every >= 1, "actors.pull_every", self.pull_every, "integers >= 1")
        _require(self.quantize_on in ("learner", "actor"), "actors.quantize_on",
                 self.quantize_on, "'learner' (q_c) or 'actor' (q)")


@dataclass
class ProcessActorsConfig(ActorPoolConfig):
    _target_: str = MISSING
    start_method: str = "spawn"  # multiprocessing: spawn | forkserver | fork

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.start_method in ("spawn", "forkserver", "fork"), "actors.start_method",
                 self.start_method, "'spawn', 'forkserver' or 'fork'")


@dataclass
class RayActorsConfig(ActorPoolConfig):
    _target_: str = MISSING
    address: Optional[str] = None  # null: start Ray here; "auto" or "ray://host:port": a cluster


@dataclass
class ActorQSchedulerConfig:
    _target_: str = MISSING


@dataclass
class UniformReplayConfig:
    _target_: str = MISSING
    capacity: int = II("algo.buffer_size")
    n_step: int = 1  # the algo's n-step returns (D4PG), through an accumulator on add
    gamma: float = 0.99

    def __post_init__(self) -> None:
        _require(self.n_step >= 1, "replay.n_step", self.n_step, "integers >= 1")


class Sampler(str, Enum):
    uniform = "uniform"
    locality = "locality"  # reference points × contiguous windows (MARL paper, Algorithm 1)
    prioritized = "prioritized"  # proportional PER
    prioritized_locality = "prioritized_locality"  # PER references, windows by priority


@dataclass
class MultiAgentReplayConfig:
    """A multi-agent layout (`per_agent` or `joint`) and the sampler that draws its indices.

    `refs` × `neighbors` transitions make a `locality` batch (the paper's 16×64 and 64×16);
    `prioritized_locality` gives each reference `neighbor_counts` by its priority over the
    max against `thresholds`. The PER keys apply to both prioritized samplers.
    """

    _target_: str = MISSING
    capacity: int = II("algo.buffer_size")
    sampler: Sampler = Sampler.uniform
    refs: int = 16
    neighbors: int = 64
    thresholds: list[float] = field(default_factory=lambda: [0.33, 0.66])
    neighbor_counts: list[int] = field(default_factory=lambda: [1, 2, 4])
    alpha: float = 0.6
    beta: float = 0.4
    beta_final: float = 1.0
    beta_anneal: int = 10_000  # sample calls over which beta rises to beta_final
    eps: float = 1e-6

    def __post_init__(self) -> None:
        _require(self.capacity >= 1, "replay.capacity", self.capacity, "integers >= 1")
        _require(self.refs >= 1, "replay.refs", self.refs, "integers >= 1")
        _require(1 <= self.neighbors <= self.capacity, "replay.neighbors", self.neighbors,
                 f"integers in [1, replay.capacity = {self.capacity}]")
        _require(len(self.thresholds) + 1 == len(self.neighbor_counts)
                 and list(self.thresholds) == sorted(self.thresholds),
                 "replay.thresholds", list(self.thresholds),
                 "increasing values, one fewer than replay.neighbor_counts")
        _require(all(n >= 1 for n in self.neighbor_counts), "replay.neighbor_counts",
                 list(self.neighbor_counts), "integers >= 1")
        _require(self.alpha >= 0, "replay.alpha", self.alpha, "floats >= 0")
        for key in ("beta", "beta_final"):
            _require(0 <= getattr(self, key) <= 1, f"replay.{key}", getattr(self, key),
                     "floats in [0, 1]")
        _require(self.beta_anneal >= 1, "replay.beta_anneal", self.beta_anneal, "integers >= 1")
        _require(self.eps > 0, "replay.eps", self.eps, "floats > 0")


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
    partitioner: Any = MISSING
    actors: Any = MISSING
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
    "env": {"gymnasium": EnvConfig, "mpe": MpeEnvConfig},
    "algo": {"dqn": DQNConfig, "ddpg": DDPGConfig, "td3": TD3Config, "d4pg": D4PGConfig,
             "a2c": A2CConfig, "ppo": PPOConfig, "maddpg": MADDPGConfig, "matd3": MATD3Config},
    "platform": {"host": HostPlatformConfig, "modeled": ModeledPlatformConfig},
    "precision": {"uniform": UniformPrecisionConfig, "mixed": HardwareAwarePrecisionConfig,
                  "qat": QATPrecisionConfig},
    "partitioner": {"ilp": IlpPartitionerConfig, "heft": HeftPartitionerConfig,
                    "single": SinglePartitionerConfig},
    "scheduler": {"sync": SyncSchedulerConfig, "onpolicy": OnPolicySchedulerConfig,
                  "actorq": ActorQSchedulerConfig},
    "replay": {"uniform": UniformReplayConfig, "multi_agent": MultiAgentReplayConfig},
    "actors": {"local": ActorsConfig, "process": ProcessActorsConfig, "ray": RayActorsConfig},
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
    _check_algo_fits_scheduler(cfg, choices)
    _check_replay_fits_env(cfg, choices)
    _check_algo_fits_platform(cfg, choices)
    _check_actors_fit_scheduler(cfg, choices)
    _check_scheduler_fits_env(cfg, choices)


def _check_algo_fits_env(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    from hetrl.options import algos_for, envs_for  # options reads the conf tree: import late

    learner = get_class(cfg.algo._target_)
    has, agents = ActionSpace(cfg.env.action_space), Agents(cfg.env.agents)
    if not learner.supports(has, agents):
        needs, needs_agents = learner.action_space, learner.agents
        raise ConfigError(
            f"algo={choices['algo']} needs a {needs_agents.value}-agent env with a "
            f"{needs.value} action space, but env={choices['env']} ({cfg.env.id}) is a "
            f"{agents.value}-agent env with a {has.value} one: choose env from "
            f"{envs_for(needs, needs_agents)} or algo from {algos_for(has, agents)}"
        )


def _check_algo_fits_platform(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """A modeled platform plans the learner's step from the learner's task graph."""
    from hetrl.options import group_options, option_class  # import late, as above

    modeled = "name" in cfg.platform  # a ModeledPlatformConfig
    if modeled and not hasattr(get_class(cfg.algo._target_), "task_graph"):
        planned = [a for a in group_options("algo") if hasattr(option_class("algo", a), "task_graph")]
        raise ConfigError(
            f"algo={choices['algo']} describes no task graph, so platform={choices['platform']} "
            f"cannot plan it: choose platform=host or algo from {planned}"
        )


def _check_replay_fits_env(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    from hetrl.options import replays_for  # import late, as above

    if get_class(cfg.algo._target_).on_policy:  # no replay
        return
    agents = Agents(cfg.env.agents)
    has = getattr(get_class(cfg.replay._target_), "agents", Agents.single)
    if has != agents:
        raise ConfigError(
            f"replay={choices['replay']} stores {has.value}-agent transitions, but "
            f"env={choices['env']} is a {agents.value}-agent env: choose replay from "
            f"{replays_for(agents)}"
        )
    if cfg.replay.get("sampler") == Sampler.locality.value:
        refs, neighbors, batch = cfg.replay.refs, cfg.replay.neighbors, cfg.algo.batch_size
        _require(refs * neighbors == batch, "replay.refs", refs,
                 f"refs × replay.neighbors ({neighbors}) = algo.batch_size ({batch})")


def _check_algo_fits_scheduler(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    from hetrl.options import algos_for_loop, schedulers_for  # import late, as above

    on_policy = get_class(cfg.algo._target_).on_policy
    if getattr(get_class(cfg.scheduler._target_), "on_policy", False) != on_policy:
        kind = "an on-policy" if on_policy else "an off-policy"
        raise ConfigError(
            f"algo={choices['algo']} is {kind} algorithm and cannot train with "
            f"scheduler={choices['scheduler']}: choose scheduler from "
            f"{schedulers_for(on_policy)} or algo from {algos_for_loop(not on_policy)}"
        )


def _check_actors_fit_scheduler(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    from hetrl.actors.pool import ActorPool  # imports the learners: import late

    from hetrl.options import group_options, option_class

    def is_pool(option: str) -> bool:
        return issubclass(option_class("actors", option), ActorPool)

    wants_pool = getattr(get_class(cfg.scheduler._target_), "actor_pool", False)
    if issubclass(get_class(cfg.actors._target_), ActorPool) != wants_pool:
        fitting = [o for o in group_options("actors") if is_pool(o) == wants_pool]
        raise ConfigError(
            f"actors={choices['actors']} does not fit scheduler={choices['scheduler']}: "
            f"choose actors from {fitting} (scheduler=actorq runs an actor pool, the other "
            "schedulers act in the learner's process)"
        )


def _check_scheduler_fits_env(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """A scheduler names the kinds of env (single- or multi-agent) its loop steps."""
    from hetrl.options import group_options, option_class  # import late, as above

    def steps(option: str, agents: Agents) -> bool:
        return agents in option_class("scheduler", option).agents

    agents = Agents(cfg.env.agents)
    if agents not in get_class(cfg.scheduler._target_).agents:
        fitting = [o for o in group_options("scheduler") if steps(o, agents)]
        raise ConfigError(
            f"scheduler={choices['scheduler']} does not step {agents.value}-agent envs such "
            f"as env={choices['env']}: choose scheduler from {fitting}"
        )
