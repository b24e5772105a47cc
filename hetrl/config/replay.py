"""Replay schemas and the samplers a multi-agent replay draws its batches with
(`conf/replay/sampler/`, one schema each)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import II, MISSING

from hetrl.config.errors import require


@dataclass
class ReplayConfig:
    _target_: str = MISSING
    # algo.buffer_size transitions; on-policy algos have no buffer and leave it unused
    capacity: int = II("oc.select:algo.buffer_size,1")

    def __post_init__(self) -> None:
        require(self.capacity >= 1, "replay.capacity", self.capacity, "integers >= 1")


@dataclass
class UniformReplayConfig(ReplayConfig):
    # the algo's n-step returns (D4PG), through an accumulator on add
    n_step: int = II("oc.select:algo.n_step,1")
    gamma: float = II("oc.select:algo.gamma,0.99")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.n_step >= 1, "replay.n_step", self.n_step, "integers >= 1")


MAX_FANOUT = 1024  # PEARL's artifact uses 16; fanout=1000000 trained 20-40x slower


def _check_per(self: Any, prefix: str) -> None:
    """The PER keys' ranges, under `prefix` (`replay` or `replay.sampler`)."""
    require(2 <= self.fanout <= MAX_FANOUT, f"{prefix}.fanout", self.fanout,
            f"integers in [2, {MAX_FANOUT}] (a sample scans each node's children on every "
            "level: a wider node makes every sample and priority update slower, a flat "
            "scan of the whole buffer at the extreme)")
    require(self.alpha >= 0, f"{prefix}.alpha", self.alpha, "floats >= 0")
    for key in ("beta", "beta_final"):
        require(0 <= getattr(self, key) <= 1, f"{prefix}.{key}", getattr(self, key),
                "floats in [0, 1]")
    require(self.beta_anneal >= 1, f"{prefix}.beta_anneal", self.beta_anneal,
            "integers >= 1")
    require(self.eps > 0, f"{prefix}.eps", self.eps, "floats > 0")


@dataclass
class PrioritizedReplayConfig(UniformReplayConfig):
    """The uniform ring plus priorities in an F-ary sum tree, stratified draws (PEARL's
    artifact defaults: fanout 16, α 0.6, β 0.4 → 1, ε 0.01)."""

    fanout: int = 16
    alpha: float = 0.6
    beta: float = 0.4
    beta_final: float = 1.0
    beta_anneal: int = 10_000  # sample calls (updates) over which beta rises to beta_final
    eps: float = 0.01

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_per(self, "replay")


@dataclass
class MultiAgentReplayConfig(ReplayConfig):
    """A multi-agent layout (`per_agent` or `joint`) and the sampler that draws its slots."""

    sampler: Any = MISSING  # a conf/replay/sampler option, built before the replay


@dataclass
class UniformSamplerConfig:
    _target_: str = MISSING


@dataclass
class LocalitySamplerConfig:
    """`refs` × `neighbors` transitions make a batch (the paper's 16×64 and 64×16)."""

    _target_: str = MISSING
    refs: int = MISSING
    neighbors: int = MISSING

    def __post_init__(self) -> None:
        require(self.refs >= 1, "replay.sampler.refs", self.refs, "integers >= 1")
        require(self.neighbors >= 1, "replay.sampler.neighbors", self.neighbors,
                "integers >= 1")


@dataclass
class PrioritizedSamplerConfig:
    """Proportional PER; the keys every prioritized sampler shares."""

    _target_: str = MISSING
    capacity: int = II("replay.capacity")
    alpha: float = 0.6
    beta: float = 0.4
    beta_final: float = 1.0
    beta_anneal: int = 10_000  # sample calls over which beta rises to beta_final
    eps: float = 1e-6
    fanout: int = 2  # of the sum tree (2: the binary tree these samplers always had)

    def __post_init__(self) -> None:
        _check_per(self, "replay.sampler")


@dataclass
class PrioritizedLocalitySamplerConfig(PrioritizedSamplerConfig):
    """Each PER reference brings a window of `neighbor_counts` slots by its priority over
    the max against `thresholds`."""

    thresholds: list[float] = MISSING
    neighbor_counts: list[int] = MISSING

    def __post_init__(self) -> None:
        super().__post_init__()
        require(len(self.thresholds) + 1 == len(self.neighbor_counts)
                and list(self.thresholds) == sorted(self.thresholds),
                "replay.sampler.thresholds", list(self.thresholds),
                "increasing values, one fewer than replay.sampler.neighbor_counts")
        require(all(n >= 1 for n in self.neighbor_counts), "replay.sampler.neighbor_counts",
                list(self.neighbor_counts), "integers >= 1")
