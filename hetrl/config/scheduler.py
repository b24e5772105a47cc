"""Scheduler schemas: the options of the training loops that take any (selfplay's live in
the run's `selfplay` node, which `scheduler` points at)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

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
    ladder_games: int = MISSING  # against each pure-MCTS rung, at each evaluation (0: none)
    ladder_simulations: list[int] = MISSING  # the rungs: random-rollout MCTS simulations a move
    # seconds of the loop's wall clock no generation is started to end after (null: no limit)
    wall_clock_s: Optional[float] = MISSING
    worker_timeout_s: float = MISSING  # a self-play worker that sends nothing this long hangs

    def __post_init__(self) -> None:
        for key in ("games_per_generation", "concurrent_games", "generations", "window",
                    "train_steps", "eval_readouts", "eval_every"):
            require(getattr(self, key) >= 1, f"selfplay.{key}", getattr(self, key),
                    "integers >= 1")
        sims = list(self.ladder_simulations)
        require(all(s >= 1 for s in sims) and len(set(sims)) == len(sims),
                "selfplay.ladder_simulations", sims, "lists of distinct integers >= 1")
        for key in ("workers", "gating_games", "eval_games", "ladder_games"):
            require(getattr(self, key) >= 0, f"selfplay.{key}", getattr(self, key),
                    "integers >= 0")
        require(self.trainers >= 1, "selfplay.trainers", self.trainers, "integers >= 1")
        require(self.wall_clock_s is None or self.wall_clock_s > 0, "selfplay.wall_clock_s",
                self.wall_clock_s, "null (no limit) or seconds > 0")
        require(self.worker_timeout_s > 0, "selfplay.worker_timeout_s", self.worker_timeout_s,
                "seconds > 0")
        require(0 <= self.gating_win_rate <= 1, "selfplay.gating_win_rate",
                self.gating_win_rate, "floats in [0, 1]")
