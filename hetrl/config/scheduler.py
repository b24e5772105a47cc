"""Scheduler schemas: the training loops take no options of their own, but PEARL's."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING

from hetrl.config.errors import require


@dataclass
class SchedulerConfig:
    _target_: str = MISSING


@dataclass
class ActorQSchedulerConfig(SchedulerConfig):
    """ActorQ's loop (scheduler=actorq): its rate limiter, `chunk` (an actor's pull waits
    while a chunk waits to be learned; updates by train_freq/gradient_steps) or
    `samples_per_insert` (the paper's: updates keep samples/inserts at `samples_per_insert`,
    pulls wait while the learner is more than `error_buffer` samples behind)."""

    rate_limiter: str = MISSING
    samples_per_insert: float = MISSING
    error_buffer: float = MISSING

    def __post_init__(self) -> None:
        require(self.rate_limiter in ("chunk", "samples_per_insert"), "scheduler.rate_limiter",
                self.rate_limiter, "chunk or samples_per_insert")
        require(self.samples_per_insert > 0, "scheduler.samples_per_insert",
                self.samples_per_insert, "floats > 0 (samples per inserted transition)")
        require(self.error_buffer >= 0, "scheduler.error_buffer", self.error_buffer,
                "floats >= 0 (samples)")


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
