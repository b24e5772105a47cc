"""Prioritized replay for single-agent off-policy learners (`replay=prioritized`): the uniform
ring's storage with PEARL's replay manager beside it.

The storage (and n-step returns) is `UniformReplay`'s; the priorities are the MARL
samplers' `PrioritizedSampler` (Schaul et al. 2016) over the project's one sum tree, F-ary
with `fanout` F (PEARL's default 16) and stratified draws, one per segment of the total
(Eq. (1), PEARL's artifact): p = (|δ| + ε)^α, new transitions at the max priority so far,
importance weights (N·P(i))^-β over the batch's max, β annealed to `beta_final`. A batch
carries its slots (`indices`) and `weights`; the update step hands the learner's
`td_errors` back through `update_priorities`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from hetrl.algos.base import Batch
from hetrl.replay.base import as_tensors
from hetrl.replay.samplers import PrioritizedSampler
from hetrl.replay.sumtree import SumTree
from hetrl.replay.uniform import UniformReplay


class PrioritizedReplay(UniformReplay):
    """`UniformReplay` whose batches are drawn in proportion to priority."""

    prioritized = True  # its batches need an off-policy learner's TD errors (validation)

    def __init__(
        self, capacity: int, obs_space: gym.Space, act_space: gym.Space, device: torch.device,
        n_step: int, gamma: float, *, fanout: int, alpha: float, beta: float, beta_final: float,
        beta_anneal: int, eps: float,
    ) -> None:
        super().__init__(capacity, obs_space, act_space, device, n_step, gamma)
        self.sampler = PrioritizedSampler(capacity, alpha, beta, beta_final, beta_anneal, eps,
                                          fanout=fanout, stratified=True)

    @property
    def tree(self) -> SumTree:
        return self.sampler.tree

    def _write(self, *values: np.ndarray) -> np.ndarray:
        slots = super()._write(*values)
        self.sampler.added(slots)  # at the max priority so far
        return slots

    def sample(self, n: int) -> Batch:
        idx, weights = self.sampler.sample(n, self.size)
        (weights,) = as_tensors([weights], self.device)
        return self._batch(idx, indices=idx, weights=weights)

    def update_priorities(self, indices: np.ndarray, td_errors: torch.Tensor) -> None:
        self.sampler.update(indices, td_errors.float().numpy(force=True))  # detached, on the CPU

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "sampler": self.sampler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.sampler.load_state_dict(state["sampler"])
