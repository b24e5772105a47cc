"""Scheduler schemas: the training loops take no options of their own, but PEARL's."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING

from hetrl.config.errors import require


@dataclass
class SchedulerConfig:
    _target_: str = MISSING


@dataclass
class PearlSchedulerConfig(SchedulerConfig):
    """PEARL's protocol (scheduler=pearl): weights published every `weight_sync_every`
    learner iterations ([A] 10), actors handing back `collect_steps` vector-env steps at a
    time (the data collection buffer), Algorithm 1 every `resource_every` iterations unless
    `dynamic_resources` is off."""

    weight_sync_every: int = MISSING
    collect_steps: int = MISSING
    dynamic_resources: bool = MISSING
    resource_every: int = MISSING
    fork_actors: bool = MISSING  # process actors forked (not spawned) while CUDA is unused

    def __post_init__(self) -> None:
        for key in ("weight_sync_every", "collect_steps", "resource_every"):
            require(getattr(self, key) >= 1, f"scheduler.{key}", getattr(self, key),
                    "integers >= 1")
