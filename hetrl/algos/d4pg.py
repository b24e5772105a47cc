"""D4PG (Barth-Maron et al. 2018): DDPG with a distributional (C51) critic and n-step returns.

The critic predicts a categorical distribution over `atoms` returns evenly spaced in
[v_min, v_max]; its target is the n-step Bellman update of the target critic's distribution,
projected back onto that support. The replay supplies the n-step returns and their bootstrap
discounts (`replay.n_step` follows `algo.n_step`). Acting and exploration noise are DDPG's,
but for the actors of an actor pool, whose noise is spread over the actors (`for_actor`).
"""

from __future__ import annotations

import gymnasium as gym
import torch

from hetrl.algos.base import Batch, weighted_mean, with_td_errors
from hetrl.algos.ddpg import DDPG
from hetrl.algos.networks import DistributionalCritic, adam, flat_dim, frozen_copy
from hetrl.algos.rule import Metrics


def project(support: torch.Tensor, next_probs: torch.Tensor, rewards: torch.Tensor,
            discounts: torch.Tensor) -> torch.Tensor:
    """C51's projection of the distribution of r + discount · Z onto `support`.

    Each shifted atom's mass is split between its two neighbours on the support, in
    proportion to closeness (all of it to one atom when it lands exactly on it). Computed in
    float32, whatever dtype the critic ran in (fp16/bf16 autocast).
    """
    next_probs = next_probs.float()
    v_min, v_max = support[0], support[-1]
    delta = support[1] - support[0]
    shifted = (rewards[:, None] + discounts[:, None] * support[None, :]).clamp(v_min, v_max)
    position = (shifted - v_min) / delta  # fractional index on the support
    lower, upper = position.floor().long(), position.ceil().long()
    upper_weight = position - lower  # 0 when the atom lands on a support point
    target = torch.zeros_like(next_probs)
    target.scatter_add_(1, lower, next_probs * (1.0 - upper_weight))
    target.scatter_add_(1, upper, next_probs * upper_weight)
    return target


class D4PG(DDPG):
    def __init__(
        self,
        obs_space: gym.Space,
        act_space: gym.spaces.Box,
        *,
        v_min: float,
        v_max: float,
        atoms: int,
        n_step: int,
        actor_noise_max: float | None,
        **ddpg,
    ) -> None:
        del n_step  # the replay's (`replay.n_step` follows it): targets use batch.discounts
        super().__init__(obs_space, act_space, **ddpg)
        self.actor_noise_max = actor_noise_max
        self.critic = DistributionalCritic(flat_dim(obs_space), flat_dim(act_space),
                                           self.hidden, atoms).to(self.device)
        self.critic_target = frozen_copy(self.critic)
        self.critic_optimizer = adam(self.critic.parameters(), self.lr)
        self.register_buffer("support", torch.linspace(v_min, v_max, atoms, device=self.device))

    def for_actor(self, rank: int, n_actors: int) -> None:
        """ActorQ's D4PG actors explore with noise of their own: actor k of K with
        σ_k = actor_noise_max · k / (K − 1), spread evenly over [0, actor_noise_max]
        (QuaRL A.1.4); one actor, or no `actor_noise_max`, keeps `noise_std`."""
        if self.actor_noise_max is not None and n_actors > 1:
            self.noise.std = self.actor_noise_max * rank / (n_actors - 1)

    def q_value(self, logits: torch.Tensor) -> torch.Tensor:
        """The mean of the critic's distribution."""
        return (logits.softmax(dim=1) * self.support).sum(dim=1)

    def critic_loss(self, batch: Batch, count: object) -> tuple[torch.Tensor, Metrics]:
        """The cross-entropy of the critic's distribution against the projected n-step
        target distribution."""
        with torch.no_grad():
            next_logits = self.critic_target(batch.next_obs, self.actor_target(batch.next_obs))
            discounts = (torch.full_like(batch.rewards, self.gamma) if batch.discounts is None
                         else batch.discounts) * (1.0 - batch.terminated)
            target = project(self.support, next_logits.softmax(dim=1), batch.rewards, discounts)

        logits = self.critic(batch.obs, batch.actions)
        cross_entropy = -(target * logits.log_softmax(dim=1)).sum(dim=1)
        loss = weighted_mean(cross_entropy, batch.weights)
        q = self.q_value(logits.detach())
        # the TD error of the distributions' means: E[r + discount · Z'] − Q(s, a)
        td_error = q - (target * self.support).sum(dim=1)
        return loss, with_td_errors({"critic_loss": loss.detach(), "q_mean": q.mean()},
                                    batch, td_error)
