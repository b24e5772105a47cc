"""TD3 (Fujimoto et al. 2018): DDPG plus twin critics, target policy smoothing and
delayed actor updates. Acting and exploration noise are DDPG's."""

from __future__ import annotations

import gymnasium as gym
import torch

from hetrl.algos.base import Batch, weighted_mean, with_td_errors
from hetrl.algos.ddpg import DDPG
from hetrl.algos.networks import QCritic, adam, flat_dim, frozen_copy
from hetrl.algos.rule import Metrics, Stage, TargetSync, every


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

    def _critics(self) -> dict[str, tuple[torch.nn.Module, torch.nn.Module]]:
        return {"critic": (self.critic, self.critic_target),
                "critic2": (self.critic2, self.critic2_target)}

    def stages(self) -> list[Stage]:
        """Both critics' step each update; the actor's once every `policy_delay`."""
        return [Stage("critic_optimizer", self.critic_loss),
                Stage("actor_optimizer", self.actor_loss, frozen=("critic",),
                      when=every(self.policy_delay), carried=("actor_loss",))]

    def targets(self) -> list[TargetSync]:
        return [TargetSync(target, online, self.tau, when=every(self.policy_delay))
                for target, online in (("critic_target", "critic"),
                                       ("critic2_target", "critic2"),
                                       ("actor_target", "actor"))]

    def critic_loss(self, batch: Batch, count: object) -> tuple[torch.Tensor, Metrics]:
        """Both critics' squared TD errors against the smaller target critic's bootstrap of
        the smoothed target action."""
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
        loss = (weighted_mean((q1 - td_target).pow(2), batch.weights)
                + weighted_mean((q2 - td_target).pow(2), batch.weights))
        return loss, with_td_errors({"critic_loss": loss.detach(), "q_mean": q1.detach().mean()},
                                    batch, q1 - td_target)
