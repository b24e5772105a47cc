"""The updates of every replay-based loop, wherever its env steps were taken: how many a
number of env steps is owed, and the update step itself."""

from __future__ import annotations

import torch

from hetrl.algos.base import OffPolicyLearner
from hetrl.precision.base import Precision
from hetrl.replay.base import Replay
from hetrl.scheduler.state import LoopState, PhaseTimer


class Updates:
    """The update schedule and the update step of an off-policy learner: `gradient_steps`
    updates for every `train_freq` env steps (counted across envs and actors), once more
    than `learning_starts` env steps are in; each update samples a batch, learns from it in
    the precision's autocast, and hands a prioritized replay the rows' new priorities."""

    def __init__(self, learner: OffPolicyLearner, replay: Replay, precision: Precision,
                 state: LoopState) -> None:
        self.learner, self.replay, self.state = learner, replay, state
        self.autocast = precision.autocast(learner.device)
        self.timer = PhaseTimer(state.phase_s)

    def owed(self, n: int) -> int:
        """Count `n` more env steps; the updates they are owed (the env steps short of a
        whole `train_freq` carry over in `state.pending`)."""
        learner, state = self.learner, self.state
        state.step += n
        rollouts, state.pending = divmod(state.pending + n, learner.train_freq)
        return rollouts * learner.gradient_steps if state.step > learner.learning_starts else 0

    def step(self) -> dict[str, torch.Tensor]:
        """One update; returns the learner's metrics."""
        learner, replay, timer = self.learner, self.replay, self.timer
        with timer("sample"):
            batch = replay.sample(learner.batch_size)
        with timer("update"), self.autocast:
            metrics = learner.update(batch)
        if batch.weights is not None:  # prioritized: new priorities
            with timer("priority_update"):
                replay.update_priorities(batch.indices, metrics.pop("td_errors"))
        self.state.updates += 1
        return metrics
