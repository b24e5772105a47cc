"""Algo schemas (names as in SB3 / rl-zoo3). Every hyperparameter is `MISSING` here: each
algo's YAML holds its values, and `conf/tuned/` rl-zoo3's per-env ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from omegaconf import II, MISSING

from hetrl.config.enums import Noise
from hetrl.config.errors import require


def _check_widths(hidden: list[int], policy_hidden: Optional[list[int]]) -> None:
    for key, widths in (("algo.hidden", hidden), ("algo.policy_hidden", policy_hidden)):
        if widths is not None:
            require(len(widths) > 0 and all(h >= 1 for h in widths), key, list(widths),
                    "a non-empty list of widths >= 1" + (" or null" if "policy" in key else ""))


@dataclass
class AlgoConfig:
    """Hyperparameters every off-policy algorithm shares."""

    _target_: str = MISSING
    batch_size: int = MISSING
    hidden: list[int] = MISSING
    # the policy network's widths (DQN: the Q-network), when they differ from `hidden`
    # (QuaRL's ActorQ: policy [2048, 2048, 2048], critic [512, 512, 512]); null: `hidden`
    policy_hidden: Optional[list[int]] = None
    lr: float = MISSING
    gamma: float = MISSING
    buffer_size: int = MISSING
    learning_starts: int = MISSING
    train_freq: int = MISSING
    gradient_steps: int = MISSING

    def __post_init__(self) -> None:
        require(self.batch_size >= 1, "algo.batch_size", self.batch_size, "integers >= 1")
        _check_widths(self.hidden, self.policy_hidden)
        require(self.lr > 0, "algo.lr", self.lr, "floats > 0")
        require(0 <= self.gamma <= 1, "algo.gamma", self.gamma, "floats in [0, 1]")
        require(self.buffer_size >= self.batch_size, "algo.buffer_size", self.buffer_size,
                f"integers >= algo.batch_size ({self.batch_size})")
        require(self.learning_starts >= 0, "algo.learning_starts", self.learning_starts,
                "integers >= 0")
        require(self.train_freq >= 1, "algo.train_freq", self.train_freq, "integers >= 1")
        require(self.gradient_steps >= 0, "algo.gradient_steps", self.gradient_steps,
                "integers >= 0")


@dataclass
class DQNConfig(AlgoConfig):
    double_dqn: bool = MISSING
    target_update_interval: int = MISSING  # in gradient updates
    exploration_fraction: float = MISSING
    exploration_initial_eps: float = MISSING
    exploration_final_eps: float = MISSING
    max_grad_norm: float = MISSING
    td_loss: str = MISSING  # huber (SB3; the 2015 DQN's error clipping) | mse (CleanRL)
    total_steps: int = II("steps")
    cnn: str = "nature"  # on image observations: nature (Mnih 2015) | dqn2013 (PEARL's Pong)

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.cnn in ("nature", "dqn2013"), "algo.cnn", self.cnn,
                "'nature' or 'dqn2013'")
        require(self.td_loss in ("huber", "mse"), "algo.td_loss", self.td_loss,
                "'huber' or 'mse'")
        require(self.target_update_interval >= 1, "algo.target_update_interval",
                self.target_update_interval, "integers >= 1")
        for key in ("exploration_fraction", "exploration_initial_eps", "exploration_final_eps"):
            value = getattr(self, key)
            require(0 <= value <= 1, f"algo.{key}", value, "floats in [0, 1]")


@dataclass
class DDPGConfig(AlgoConfig):
    tau: float = MISSING
    action_noise: Noise = MISSING
    noise_std: float = MISSING

    def __post_init__(self) -> None:
        super().__post_init__()
        require(0 < self.tau <= 1, "algo.tau", self.tau, "floats in (0, 1]")
        require(self.noise_std >= 0, "algo.noise_std", self.noise_std, "floats >= 0")


@dataclass
class TwinDelayed:
    """TD3's additions to a DDPG-style learner (TD3, MATD3): delayed actor and target
    updates and target policy smoothing. Listed first among the bases, so that its checks
    follow the learner's."""

    policy_delay: int = MISSING
    target_noise: float = MISSING
    target_noise_clip: float = MISSING

    def __post_init__(self) -> None:
        super().__post_init__()  # type: ignore[misc]  # the learner config's, next in the MRO
        require(self.policy_delay >= 1, "algo.policy_delay", self.policy_delay, "integers >= 1")
        require(self.target_noise >= 0, "algo.target_noise", self.target_noise, "floats >= 0")


@dataclass
class TD3Config(TwinDelayed, DDPGConfig):
    pass


@dataclass
class D4PGConfig(DDPGConfig):
    v_min: float = MISSING
    v_max: float = MISSING
    atoms: int = MISSING
    n_step: int = MISSING
    # an actor pool's actor k of K explores with σ_k = actor_noise_max·k/(K−1); null: noise_std
    actor_noise_max: Optional[float] = MISSING

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.v_max > self.v_min, "algo.v_max", self.v_max,
                f"floats > algo.v_min ({self.v_min})")
        require(self.actor_noise_max is None or self.actor_noise_max >= 0,
                "algo.actor_noise_max", self.actor_noise_max, "null or floats >= 0")
        require(self.atoms >= 2, "algo.atoms", self.atoms, "integers >= 2")
        require(self.n_step >= 1, "algo.n_step", self.n_step, "integers >= 1")


@dataclass
class MADDPGConfig(AlgoConfig):
    """MADDPG with the MARL paper's settings (extract B.3): `train_freq` env steps between
    update rounds, `gradient_steps` rounds each, a round (one update) training every agent's
    trainer on its own mini-batch of `batch_size`; updates start at batch × episode length
    stored transitions."""

    tau: float = MISSING
    max_grad_norm: float = MISSING
    policy_reg: float = MISSING  # weight of mean(logits²) in the actor loss (openai/maddpg)

    def __post_init__(self) -> None:
        super().__post_init__()
        require(0 < self.tau <= 1, "algo.tau", self.tau, "floats in (0, 1]")
        require(self.max_grad_norm > 0, "algo.max_grad_norm", self.max_grad_norm, "floats > 0")
        require(self.policy_reg >= 0, "algo.policy_reg", self.policy_reg, "floats >= 0")


@dataclass
class MATD3Config(TwinDelayed, MADDPGConfig):
    """MADDPG plus twin critics, target smoothing (on the target's soft actions) and delayed
    actor and target updates."""


@dataclass
class A2CConfig:
    """On-policy hyperparameters (SB3 names), shared by PPO. No replay buffer, no
    learning_starts: each update trains on a fresh rollout of n_steps × n_envs transitions
    (hetrl.algos.base.OnPolicyLearner.rollout_size)."""

    _target_: str = MISSING
    hidden: list[int] = MISSING
    policy_hidden: Optional[list[int]] = None  # as AlgoConfig's
    lr: float = MISSING
    gamma: float = MISSING
    n_steps: int = MISSING  # per env
    gae_lambda: float = MISSING
    ent_coef: float = MISSING
    vf_coef: float = MISSING
    max_grad_norm: float = MISSING
    normalize_advantage: bool = MISSING
    n_envs: int = II("env.n_envs")

    def __post_init__(self) -> None:
        _check_widths(self.hidden, self.policy_hidden)
        require(self.lr > 0, "algo.lr", self.lr, "floats > 0")
        require(0 <= self.gamma <= 1, "algo.gamma", self.gamma, "floats in [0, 1]")
        require(self.n_steps >= 1, "algo.n_steps", self.n_steps, "integers >= 1")
        require(0 <= self.gae_lambda <= 1, "algo.gae_lambda", self.gae_lambda,
                "floats in [0, 1]")
        for key in ("ent_coef", "vf_coef"):
            require(getattr(self, key) >= 0, f"algo.{key}", getattr(self, key), "floats >= 0")
        require(self.max_grad_norm > 0, "algo.max_grad_norm", self.max_grad_norm, "floats > 0")
        require(not self.normalize_advantage or self.n_steps * self.n_envs > 1, "algo.n_steps",
                self.n_steps, "n_steps × env.n_envs > 1 to normalize advantages")


@dataclass
class PPOConfig(A2CConfig):
    """`batch_size` is the minibatch size."""

    batch_size: int = MISSING
    n_epochs: int = MISSING
    clip_range: float = MISSING

    def __post_init__(self) -> None:
        super().__post_init__()
        rollout = self.n_steps * self.n_envs
        require(1 <= self.batch_size <= rollout, "algo.batch_size", self.batch_size,
                f"integers in [1, n_steps × env.n_envs = {rollout}]")
        require(not self.normalize_advantage or self.batch_size > 1, "algo.batch_size",
                self.batch_size, "integers > 1 to normalize advantages")
        require(self.n_epochs >= 1, "algo.n_epochs", self.n_epochs, "integers >= 1")
        require(self.clip_range > 0, "algo.clip_range", self.clip_range, "floats > 0")


@dataclass
class SearchSchema:
    """MiniGo's search (spec C.1.9). A nested node has its defaults here (the algo's YAML
    sets the ones it changes), and only here: the search's `hetrl.algos.mcts.SearchConfig`
    is this schema with the search's methods, declaring no field of its own."""

    readouts: int = 64  # per full move
    fast_readouts: int = 16  # per fast move (playout-cap randomization)
    fastplay_frequency: float = 0.75  # share of fast moves (not trained on)
    virtual_losses: int = 4  # leaves one game selects per round
    c_puct_base: float = 19652.0
    c_puct_init: float = 1.25
    value_init_penalty: float = 0.2
    dirichlet_alpha: Optional[float] = None  # None: 0.03 * 361 / (N*N + 1)
    noise_mix: float = 0.25
    softpick_moves: Optional[int] = None  # None: (N*N // 12) // 2 * 2
    resign_threshold: float = -0.9
    resign_disable_pct: float = 0.1
    # pass only once every other legal move would fill one of the mover's own eyes (MiniGo
    # passes freely; a young 9x9 network then settles into games one side ends by passing)
    pass_when_done: bool = False

    def __post_init__(self) -> None:
        for key in ("readouts", "fast_readouts", "virtual_losses"):
            require(getattr(self, key) >= 1, f"algo.search.{key}", getattr(self, key),
                    "integers >= 1")
        for key in ("fastplay_frequency", "noise_mix", "resign_disable_pct"):
            require(0 <= getattr(self, key) <= 1, f"algo.search.{key}", getattr(self, key),
                    "floats in [0, 1]")
        require(-1 <= self.resign_threshold <= 0, "algo.search.resign_threshold",
                self.resign_threshold, "floats in [-1, 0] (-1: never resign)")


@dataclass
class AlphaZeroConfig:
    """MiniGo's network, loss and optimizer (spec C.1.9), and its search."""

    _target_: str = MISSING
    width: int = MISSING  # filters of every conv3x3 (MLPerf 9x9: 64)
    blocks: int = MISSING  # residual blocks (MLPerf 9x9: 9)
    batch_size: int = MISSING
    lr_values: list[float] = MISSING  # piecewise constant ...
    lr_boundaries: list[int] = MISSING  # ... changing at these updates
    momentum: float = MISSING
    l2: float = MISSING
    value_weight: float = MISSING
    search: SearchSchema = MISSING  # the YAML sets the keys it changes; the rest keep their defaults

    def __post_init__(self) -> None:
        require(self.width >= 1, "algo.width", self.width, "integers >= 1")
        require(self.blocks >= 0, "algo.blocks", self.blocks, "integers >= 0")
        require(self.batch_size >= 1, "algo.batch_size", self.batch_size, "integers >= 1")
        require(len(self.lr_values) == len(self.lr_boundaries) + 1, "algo.lr_values",
                list(self.lr_values), f"one more value than algo.lr_boundaries "
                f"({len(self.lr_boundaries)})")
        require(all(v > 0 for v in self.lr_values), "algo.lr_values", list(self.lr_values),
                "floats > 0")
        require(0 <= self.momentum < 1, "algo.momentum", self.momentum, "floats in [0, 1)")
