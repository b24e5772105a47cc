"""PPO (Schulman et al. 2017), clipped surrogate objective, as in SB3/CleanRL: A2C's networks
and rollout, trained for `n_epochs` passes over the rollout in shuffled minibatches of
`batch_size`, with Adam."""

from __future__ import annotations

from typing import Iterable

import gymnasium as gym
import torch

from hetrl.algos.a2c import A2C
from hetrl.algos.base import RolloutBatch
from hetrl.algos.rule import Metrics


class PPO(A2C):
    def __init__(
        self,
        obs_space: gym.Space,
        act_space: gym.Space,
        *,
        batch_size: int,
        n_epochs: int,
        clip_range: float,
        **a2c,
    ) -> None:
        super().__init__(obs_space, act_space, **a2c)
        self.batch_size, self.n_epochs, self.clip_range = batch_size, n_epochs, clip_range

    def make_optimizer(self, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
        """SB3's PPO optimizer: Adam with eps 1e-5."""
        return torch.optim.Adam(params, lr=self.lr, eps=1e-5)

    def policy_loss(self, dist: torch.distributions.Distribution,
                    batch: RolloutBatch) -> tuple[torch.Tensor, Metrics]:
        """The clipped surrogate objective, with its clip fraction and approximate KL."""
        advantages = self.advantages(batch)
        ratio = (dist.log_prob(batch.actions) - batch.log_probs).exp()
        clipped = ratio.clamp(1 - self.clip_range, 1 + self.clip_range)
        policy_loss = -torch.min(advantages * ratio, advantages * clipped).mean()
        with torch.no_grad():
            clip_fraction = ((ratio - 1).abs() > self.clip_range).float().mean()
            approx_kl = ((ratio - 1) - ratio.log()).mean()  # CleanRL's k3 estimator
        return policy_loss, {"clip_fraction": clip_fraction, "approx_kl": approx_kl}
