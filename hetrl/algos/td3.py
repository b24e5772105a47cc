"""TD3 (Fujimoto et al. 2018): DDPG plus twin critics, target policy smoothing and
delayed actor updates. Acting and exploration noise are DDPG's."""

from __future__ import annotations

import gymnasium as gym
import torch

from hetrl.algos.base import Batch, weighted_mean, with_td_errors
from hetrl.algos.ddpg import DDPG
from hetrl.algos.networks import QCritic, adam, flat_dim, frozen_copy, polyak_update


class TD3(DDPG):
    def __init__(
        self,
        obs_space: gym.Space,
        act_space: gym.spaces.Box,
        *,
        policy_delay: int,
        target_noise: float,
        target_noise_clip: float,
        **ddpg,
    ) -> None:
        super().__init__(obs_space, act_space, **ddpg)
        self.policy_delay = policy_delay
        self.target_noise, self.target_noise_clip = target_noise, target_noise_clip
        self.critic2 = QCritic(flat_dim(obs_space), flat_dim(act_space), self.hidden).to(self.device)
        self.critic2_target = frozen_copy(self.critic2)
        self.critic_optimizer = adam([*self.critic.parameters(), *self.critic2.parameters()], self.lr)
        self.last_actor_loss = torch.zeros((), device=self.device)

    def _critics(self) -> dict[str, tuple[torch.nn.Module, torch.nn.Module]]:
        return {"critic": (self.critic, self.critic_target),
                "critic2": (self.critic2, self.critic2_target)}

    def update(self, batch: Batch) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            smoothing = (torch.randn_like(batch.actions) * self.target_noise).clamp(
                -self.target_noise_clip, self.target_noise_clip
            ) * self.actor.scale
            next_actions = (self.actor_target(batch.next_obs) + smoothing).clamp(self.low, self.high)
            next_q = torch.min(
                self.critic_target(batch.next_obs, next_actions),
                self.critic2_target(batch.next_obs, next_actions),
            )
            td_target = batch.rewards + self.gamma * (1.0 - batch.terminated) * next_q

        q1 = self.critic(batch.obs, batch.actions)
        q2 = self.critic2(batch.obs, batch.actions)
        critic_loss = (weighted_mean((q1 - td_target).pow(2), batch.weights)
                       + weighted_mean((q2 - td_target).pow(2), batch.weights))
        self.optimize(self.critic_optimizer, critic_loss)

        self.updates += 1
        if self.updates % self.policy_delay == 0:
            actor_loss = self.actor_loss(batch.obs)
            self.optimize(self.actor_optimizer, actor_loss)
            self.last_actor_loss = actor_loss.detach()

            polyak_update(self.critic_target, self.critic, self.tau)
            polyak_update(self.critic2_target, self.critic2, self.tau)
            polyak_update(self.actor_target, self.actor, self.tau)
        return with_td_errors({"critic_loss": critic_loss.detach(),
                               "actor_loss": self.last_actor_loss, "q_mean": q1.detach().mean()},
                              batch, q1 - td_target)
