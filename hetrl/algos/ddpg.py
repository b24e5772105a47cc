"""DDPG (Lillicrap et al. 2016): deterministic actor, Q critic, Polyak-averaged targets."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from hetrl.algos.base import Batch, OffPolicyLearner, weighted_mean, with_td_errors
from hetrl.algos.networks import Actor, QCritic, adam, flat_dim, frozen_copy
from hetrl.algos.rule import Metrics, Stage, TargetSync
from hetrl.algos.noise import ActionNoise
from hetrl.config.enums import ActionSpace
from hetrl.partition.builder import mlp_input_shape
from hetrl.partition.graph import TaskGraph
from hetrl.partition.steps import actor_critic_step_graph


class DDPG(OffPolicyLearner):
    action_space = ActionSpace.continuous

    def __init__(
        self,
        obs_space: gym.Space,
        act_space: gym.spaces.Box,
        *,
        tau: float,
        action_noise: str,
        noise_std: float,
        **common,
    ) -> None:
        super().__init__(**common)
        self.tau = tau
        obs_dim, act_dim = flat_dim(obs_space), flat_dim(act_space)
        self.actor = Actor(obs_dim, self.policy_hidden, act_space).to(self.device)
        self.critic = QCritic(obs_dim, act_dim, self.hidden).to(self.device)
        self.actor_target = frozen_copy(self.actor)
        self.critic_target = frozen_copy(self.critic)
        self.actor_optimizer = adam(self.actor.parameters(), self.lr)
        self.critic_optimizer = adam(self.critic.parameters(), self.lr)
        self.noise = ActionNoise(action_noise, noise_std, act_dim, self.device)
        self.low = torch.as_tensor(act_space.low, device=self.device)
        self.high = torch.as_tensor(act_space.high, device=self.device)

    @torch.no_grad()
    def act(self, obs: np.ndarray, step: int | None) -> np.ndarray:
        actions = self.actor(self.obs_tensor(obs))
        if step is not None:
            actions = actions + self.noise.sample(len(actions)) * self.actor.scale
            actions = actions.clamp(self.low, self.high)
        return actions.cpu().numpy()

    def end_episodes(self, done: np.ndarray) -> None:
        self.noise.reset(done)

    def task_graph(self, batch_size: int) -> TaskGraph:
        """One `update` as a task graph."""
        return actor_critic_step_graph(batch_size, mlp_input_shape(self.actor), self.actor,
                                       self.actor_target, self._critics())

    def _critics(self) -> dict[str, tuple[torch.nn.Module, torch.nn.Module]]:
        """The critics the step trains, by name, each with its target."""
        return {"critic": (self.critic, self.critic_target)}

    def q_value(self, critic_output: torch.Tensor) -> torch.Tensor:
        """Q(s, a) of the critic's output (DDPG's critic outputs it)."""
        return critic_output

    def stages(self) -> list[Stage]:
        """The critic's step, then the actor's through the critic just stepped (frozen)."""
        return [Stage("critic_optimizer", self.critic_loss),
                Stage("actor_optimizer", self.actor_loss, frozen=("critic",))]

    def targets(self) -> list[TargetSync]:
        return [TargetSync("critic_target", "critic", self.tau),
                TargetSync("actor_target", "actor", self.tau)]

    def actor_loss(self, batch: Batch, count: object) -> tuple[torch.Tensor, Metrics]:
        """−Q(s, π(s)), backpropagated through the critic into the actor."""
        loss = -self.q_value(self.critic(batch.obs, self.actor(batch.obs))).mean()
        return loss, {"actor_loss": loss.detach()}

    def critic_loss(self, batch: Batch, count: object) -> tuple[torch.Tensor, Metrics]:
        """The squared TD error against the target networks' bootstrap."""
        with torch.no_grad():
            next_q = self.critic_target(batch.next_obs, self.actor_target(batch.next_obs))
            td_target = batch.rewards + self.gamma * (1.0 - batch.terminated) * next_q

        q = self.critic(batch.obs, batch.actions)
        loss = weighted_mean((q - td_target).pow(2), batch.weights)
        return loss, with_td_errors({"critic_loss": loss.detach(), "q_mean": q.detach().mean()},
                                    batch, q - td_target)
