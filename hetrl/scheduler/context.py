"""What a training loop is handed: built components and the job's callbacks."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

import gymnasium as gym

from hetrl.algos.base import Learner
from hetrl.precision.uniform import UniformPrecision
from hetrl.replay.uniform import UniformReplay
from hetrl.scheduler.state import LoopState


class Stopped(KeyboardInterrupt):
    """The loop stopped at a step boundary on request (Ctrl-C, SIGTERM), after a checkpoint."""


@dataclass
class Training:
    envs: gym.vector.VectorEnv
    learner: Learner
    replay: UniformReplay
    precision: UniformPrecision
    steps: int
    log_every: int
    checkpoint_every: int  # 0: no periodic checkpoints
    report: Callable[[int, dict[str, float]], None]  # (step, metrics): tracker and progress
    checkpoint: Callable[[LoopState], None]
    stop: threading.Event = field(default_factory=threading.Event)


TRAINING_PHASES = ("replay_add", "sample", "update")
"""PEARL's training iteration: what eps_host divides by."""


def loop_metrics(state: LoopState, learner: Learner, learner_metrics: dict) -> dict[str, float]:
    """The metrics of DESIGN.md at this point of the loop."""
    wall = max(state.elapsed_s, 1e-9)
    train_s = sum(state.phase_s.get(name, 0.0) for name in TRAINING_PHASES)
    metrics = {
        "sps": state.step / wall,
        "eps_host": learner.batch_size * state.updates / train_s if train_s > 0 else 0.0,
        "episodes": float(state.episodes),
        "updates": float(state.updates),
        "precision/skipped_steps": float(learner.skipped_steps),
    }
    if (mean := state.return_mean_100()) is not None:
        metrics["return_mean_100"] = mean
    for name, seconds in state.phase_s.items():
        metrics[f"phase/{name}_s"] = seconds
        metrics[f"phase/{name}_pct"] = 100.0 * seconds / wall
    metrics.update({f"learner/{k}": float(v) for k, v in learner_metrics.items()})
    return metrics
