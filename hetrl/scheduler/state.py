"""The training loop's progress: counters, recent returns, phase times. Checkpointed whole."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np



class Report(Enum):
    """What a loop reports, so that each listener takes what it shows: the loop's figures at
    a log step, an evaluation's, or an event's (a PEARL decision, where the actors run)."""

    loop = "loop"
    evaluation = "evaluation"
    event = "event"


@dataclass
class LoopState:
    step: int = 0  # env steps (transitions) so far, across all envs
    updates: int = 0  # gradient updates so far
    pending: int = 0  # env steps since the last training rollout
    episodes: int = 0
    returns: deque[float] = field(default_factory=lambda: deque(maxlen=100))
    history: list[tuple[int, float]] = field(default_factory=list)  # (step, return_mean_100)
    phase_s: dict[str, float] = field(default_factory=dict)
    elapsed_s: float = 0.0  # wall time inside the loop, across resumes
    history_s: list[float] = field(default_factory=list)  # elapsed_s at each history point
    # (step, elapsed_s) of the log where return_mean_100 first reached the job's stop_return
    reached: tuple[int, float] | None = None
    actors: dict[int, dict[str, float]] = field(default_factory=dict)  # rank -> stat totals
    obs: np.ndarray | None = None
    eval_history: list[tuple[int, float]] = field(default_factory=list)  # (step, eval return)
    # the best evaluation so far: (step, eval return, the learner's state_dict then)
    eval_best: tuple[int, float, dict[str, Any]] | None = None
    progress: Any = None  # a loop's own progress, a dataclass of its own (self-play's)

    def record_episodes(self, returns: np.ndarray) -> None:
        self.returns.extend(float(r) for r in returns)
        self.episodes += len(returns)

    def record_actor(self, rank: int, stats: dict[str, float]) -> None:
        """Add an actor's stats of one chunk to its totals."""
        totals = self.actors.setdefault(rank, {})
        for name, value in stats.items():
            totals[name] = totals.get(name, 0.0) + value

    def return_mean_100(self) -> float | None:
        return float(np.mean(self.returns)) if self.returns else None
