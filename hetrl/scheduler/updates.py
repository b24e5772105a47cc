"""The updates of every replay-based loop, wherever its env steps were taken: how many a
number of env steps is owed, and the update step itself (MiniGo's loop steps it too, on its
window of generations, on one rank or many)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np
import torch

from hetrl.algos.base import Batch, Learner
from hetrl.precision.base import Precision
from hetrl.replay.base import Replay
from hetrl.scheduler.state import LoopState
from hetrl.timing import PhaseTimer

if TYPE_CHECKING:
    from hetrl.replay.loader import WindowLoader


class Updates:
    """The update schedule and the update step of an off-policy learner: `gradient_steps`
    updates for every `train_freq` env steps (counted across envs and actors), once more
    than `learning_starts` env steps are in; each update samples a batch, learns from it in
    the precision's autocast (`learn`: the learner's update, compiled where `compile` chose
    it, then counted), and hands a prioritized replay the rows' new priorities.

    `owed` reads an `OffPolicyLearner`'s schedule; MiniGo's loop, whose AlphaZero trains a
    fixed number of steps a generation, calls `step` alone, on its window of generations
    (`hetrl.replay.window`, read through `hetrl.replay.loader.WindowLoader`). Trained data-parallel over `ranks` ranks, each rank's step
    samples its share of the learner's batch."""

    def __init__(self, learner: Learner, replay: Replay | WindowLoader,
                 precision: Precision, state: LoopState, ranks: int = 1) -> None:
        self.learner, self.replay, self.state = learner, replay, state
        self.rows = max(1, learner.batch_size // ranks)
        self.autocast = precision.autocast(learner.device)
        self.timer = PhaseTimer(state.phase_s)

    def owed(self, n: int) -> int:
        """Count `n` more env steps; the updates they are owed (the env steps short of a
        whole `train_freq` carry over in `state.pending`)."""
        learner, state = self.learner, self.state
        state.step += n
        rollouts, state.pending = divmod(state.pending + n, learner.train_freq)
        return rollouts * learner.gradient_steps if state.step > learner.learning_starts else 0

    def step(self, after_sample: Callable[[Batch], Callable[[np.ndarray], np.ndarray | None]]
             | None = None) -> dict[str, torch.Tensor]:
        """One update; returns the learner's metrics. `after_sample(batch)` (PEARL's loop)
        runs once the batch is sampled, before the learner trains on it, and returns the mask
        of the rows whose priority update may still go in (their slots not overwritten since;
        None: all of them)."""
        learner, replay, timer = self.learner, self.replay, self.timer
        with timer("sample"):
            batch = replay.sample(self.rows)
        keep = after_sample(batch) if after_sample is not None else None
        with timer("update"), self.autocast:
            metrics = learner.learn(batch)
        if batch.weights is not None:  # prioritized: new priorities
            with timer("priority_update"):
                indices, td_errors = batch.indices, metrics.pop("td_errors")
                # collision check: drop the stale rows' updates (most batches have none)
                if keep is not None and (mask := keep(indices)) is not None:
                    indices = indices[mask]
                    td_errors = td_errors[torch.as_tensor(mask, device=td_errors.device)]
                replay.update_priorities(indices, td_errors)
        self.state.updates += 1
        return metrics

