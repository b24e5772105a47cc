"""MATD3 (Ackermann et al. 2019): MADDPG plus twin critics per agent (the target takes their
minimum), target smoothing (clipped Gaussian noise on the target's soft actions, extract E.2)
and actor and target updates once every `policy_delay` updates of a trainer."""

from __future__ import annotations

import gymnasium as gym
import torch
from torch import nn

from hetrl.algos.base import Batch
from hetrl.algos.maddpg import MADDPG, _weighted_mse
from hetrl.algos.networks import adam, frozen, frozen_copy, mlp, polyak_update


class MATD3(MADDPG):
    def __init__(
        self,
        obs_space: gym.spaces.Box,
        act_space: gym.spaces.MultiDiscrete,
        *,
        policy_delay: int,
        target_noise: float,
        target_noise_clip: float,
        **maddpg,
    ) -> None:
        super().__init__(obs_space, act_space, **maddpg)
        self.policy_delay = policy_delay
        self.target_noise, self.target_noise_clip = target_noise, target_noise_clip
        joint_dim = sum(self.obs_dims) + sum(self.n_actions)
        self.critics2 = nn.ModuleList(
            mlp([joint_dim, *self.hidden, 1]) for _ in self.obs_dims).to(self.device)
        self.critic2_targets = frozen_copy(self.critics2)
        self.critic_optimizer = adam([*self.critics.parameters(), *self.critics2.parameters()],
                                     self.lr)
        self.last_actor_loss = torch.zeros((), device=self.device)

    def update(self, batch: Batch) -> dict[str, torch.Tensor]:
        i = self.updates % self.n_agents  # the trainer whose turn it is
        actions = self._one_hot(batch.actions)
        with self.timer("target_q"), torch.no_grad():
            next_actions = [
                a + (torch.randn_like(a) * self.target_noise).clamp(-self.target_noise_clip,
                                                                    self.target_noise_clip)
                for a in self._soft_actions(self.actor_targets, batch.next_obs)
            ]
            joint_next = self._joint(batch.next_obs, next_actions)
            next_q = torch.min(self.critic_targets[i](joint_next),
                               self.critic2_targets[i](joint_next)).squeeze(1)
            td_target = batch.rewards[:, i] + self.gamma * (1.0 - batch.terminated[:, i]) * next_q

        with self.timer("q_loss"):
            joint = self._joint(batch.obs, actions)
            q1 = self.critics[i](joint).squeeze(1)
            q2 = self.critics2[i](joint).squeeze(1)
            td_error = q1 - td_target
            critic_loss = (_weighted_mse(td_error, batch.weights)
                           + _weighted_mse(q2 - td_target, batch.weights))
            self.optimize(self.critic_optimizer, critic_loss, self.max_grad_norm)

        if (self.updates // self.n_agents) % self.policy_delay == 0:  # this trainer's turn
            with self.timer("p_loss"), frozen(self.critics[i]):
                actor_loss = self._actor_loss(i, batch.obs, actions, self.critics[i])
                self.optimize(self.actor_optimizer, actor_loss, self.max_grad_norm)
                self.last_actor_loss = actor_loss.detach()
            with self.timer("target_update"):
                polyak_update(self.critic_targets[i], self.critics[i], self.tau)
                polyak_update(self.critic2_targets[i], self.critics2[i], self.tau)
                polyak_update(self.actor_targets[i], self.actors[i], self.tau)
        self.updates += 1
        return self._metrics(critic_loss, self.last_actor_loss, q1, td_error, batch)
