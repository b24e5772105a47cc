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

    def __post_init__(self) -> None:
        for key in ("weight_sync_every", "collect_steps", "resource_every"):
            require(getattr(self, key) >= 1, f"scheduler.{key}", getattr(self, key),
                    "integers >= 1")


@dataclass
class SelfPlaySchedulerConfig(SchedulerConfig):
    """MiniGo's loop (scheduler=selfplay, `hetrl.scheduler.selfplay`)."""

    workers: int = MISSING  # self-play processes (0: in the learner's process)
    trainers: int = MISSING  # data-parallel trainers (DDP over gloo; 1: this process alone)
    games_per_generation: int = MISSING
    concurrent_games: int = MISSING  # games whose leaves are batched, per process
    generations: int = MISSING
    window: int = MISSING  # generations of games trained on (MLPerf: 5)
    train_steps: int = MISSING  # updates per generation
    gating_games: int = MISSING  # 0: every generation is accepted
    gating_win_rate: float = MISSING  # MLPerf: 0.49
    eval_games: int = MISSING  # against a uniformly random player
    eval_readouts: int = MISSING  # readouts per move in gating and evaluation
    eval_every: int = MISSING  # generations between evaluations (and the last)

    def __post_init__(self) -> None:
        for key in ("games_per_generation", "concurrent_games", "generations", "window",
                    "train_steps", "eval_readouts", "eval_every"):
            require(getattr(self, key) >= 1, f"scheduler.{key}", getattr(self, key),
                    "integers >= 1")
        for key in ("workers", "gating_games", "eval_games"):
            require(getattr(self, key) >= 0, f"scheduler.{key}", getattr(self, key),
                    "integers >= 0")
        require(self.trainers >= 1, "scheduler.trainers", self.trainers, "integers >= 1")
        require(0 <= self.gating_win_rate <= 1, "scheduler.gating_win_rate",
                self.gating_win_rate, "floats in [0, 1]")
