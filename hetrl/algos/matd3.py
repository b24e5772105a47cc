"""MATD3 (Ackermann et al. 2019): MADDPG plus twin critics per agent (the target takes their
minimum), target smoothing (clipped Gaussian noise on the target's soft actions, extract E.2)
and actor and target updates once every `policy_delay` updates (each update trains every
trainer: `hetrl.algos.maddpg`)."""

from __future__ import annotations

from dataclasses import replace

import gymnasium as gym
import torch

from hetrl.algos.base import Batch
from hetrl.algos.ensemble import stacked_mlp
from hetrl.algos.maddpg import MADDPG, own
from hetrl.algos.networks import adam, frozen_copy
from hetrl.algos.rule import Metrics, Stage, TargetSync


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
        self.critics2 = stacked_mlp(self.n_agents, [joint_dim, *self.hidden, 1]).to(self.device)
        self.critic2_targets = frozen_copy(self.critics2)
        self.critic_optimizer = adam([*self.critics.parameters(), *self.critics2.parameters()],
                                     self.lr)

    def delayed(self, count: object) -> object:
        """Whether the trainers' actors and targets update in this update."""
        return count % self.policy_delay == 0

    def stages(self) -> list[Stage]:
        """Both critics' step every update, the actor's in every `policy_delay`-th."""
        critic, actor = super().stages()
        return [critic, replace(actor, when=self.delayed, carried=("actor_loss",))]

    def trained_critics(self) -> tuple[str, ...]:
        return ("critics", "critics2")

    def targets(self) -> list[TargetSync]:
        return [TargetSync(target, online, self.tau, when=self.delayed)
                for target, online in (("critic_targets", "critics"),
                                       ("critic2_targets", "critics2"),
                                       ("actor_targets", "actors"))]

    def critic_loss(self, batch: Batch, count: object) -> tuple[torch.Tensor, Metrics]:
        """Both critics of each trainer against the smaller target critic's bootstrap of the
        smoothed target actions, on its own mini-batch."""
        b = self.by_trainer(batch)
        with self.timer("target_q"), torch.no_grad():
            soft = self._soft_actions(self.actor_targets, b.next_obs)
            next_actions = soft + (torch.randn_like(soft) * self.target_noise).clamp(
                -self.target_noise_clip, self.target_noise_clip)
            joint_next = self._joint(b.next_obs, next_actions)
            next_q = torch.min(self._q(self.critic_targets, joint_next),
                               self._q(self.critic2_targets, joint_next))
            td_target = own(b.rewards) + self.gamma * (1.0 - own(b.terminated)) * next_q
        with self.timer("q_loss"):
            joint = self._joint(b.obs, self._one_hot(b.actions))
            q1, q2 = self._q(self.critics, joint), self._q(self.critics2, joint)
            return self._critic_metrics(q1 - td_target, q1, b, q2 - td_target)
