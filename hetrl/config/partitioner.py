"""Partitioner schemas: how a step's task graph is placed on a platform's devices."""

from __future__ import annotations

from dataclasses import dataclass

from typing import Optional

from omegaconf import MISSING

from hetrl.config.errors import require


@dataclass
class IlpPartitionerConfig:
    _target_: str = MISSING
    time_limit_s: float = MISSING
    communication: bool = MISSING
    disjunctive: bool = MISSING

    def __post_init__(self) -> None:
        require(self.time_limit_s > 0, "partitioner.time_limit_s", self.time_limit_s,
                "floats > 0 (seconds)")


@dataclass
class HeftPartitionerConfig:
    _target_: str = MISSING


@dataclass
class SinglePartitionerConfig:
    _target_: str = MISSING
    device: str = MISSING


@dataclass
class ComposerPartitionerConfig:
    """PEARL's System Composer: the sum tree's shape and the insertion traffic it weighs."""

    _target_: str = MISSING
    fanout: int = MISSING
    capacity: Optional[int] = MISSING  # null: the algo's buffer_size
    insert_batch: Optional[int] = MISSING  # null: the algo's batch_size
    n_actors: int = MISSING

    def __post_init__(self) -> None:
        require(self.fanout >= 2, "partitioner.fanout", self.fanout, "integers >= 2")
        for key in ("capacity", "insert_batch"):
            value = getattr(self, key)
            require(value is None or value >= 1, f"partitioner.{key}", value,
                    "null or integers >= 1")
        require(self.n_actors >= 1, "partitioner.n_actors", self.n_actors, "integers >= 1")
