"""Partitioner schemas: how a step's task graph is placed on a platform's devices."""

from __future__ import annotations

from dataclasses import dataclass

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
