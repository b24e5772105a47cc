"""MADDPG (Lowe et al. 2017) as in openai/maddpg and the MARL paper (extract B.1.2):
decentralized actors, one centralized critic per agent on every agent's observation and
action, Gumbel-softmax actions for discrete moves, Polyak-averaged targets.

The sync scheduler hands over one batch per `update`: an update round is `n_agents`
consecutive updates, each training the next agent's trainer on its own mini-batch, so the
loop samples once per trainer (the paper's O(N²·B) sampling) and times it as `sample`. The
update times its own phases: `target_q`, `q_loss`, `p_loss`, `target_update`.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hetrl.algos.base import Batch, OffPolicyLearner, weighted_mean
from hetrl.algos.networks import adam, frozen, frozen_copy, mlp, polyak_update
from hetrl.config.enums import ActionSpace, Agents


class MADDPG(OffPolicyLearner):
    action_space = ActionSpace.discrete
    agents = Agents.multi

    def __init__(
        self,
        obs_space: gym.spaces.Box,
        act_space: gym.spaces.MultiDiscrete,
        *,
        tau: float,
        max_grad_norm: float,
        policy_reg: float,
        **common,
    ) -> None:
        super().__init__(**common)
        self.tau, self.max_grad_norm, self.policy_reg = tau, max_grad_norm, policy_reg
        self.n_agents = int(obs_space.shape[0])
        self.rounds = self.gradient_steps  # update rounds per train_freq env steps
        self.gradient_steps = self.rounds * self.n_agents  # one scheduler batch per trainer
        # observations are padded to the widest agent; the padding has bounds [0, 0]
        real = obs_space.high > obs_space.low
        self.obs_dims = [int(d) for d in real.sum(axis=1)]
        self.n_actions = [int(n) for n in act_space.nvec]
        self.register_buffer("real", torch.as_tensor(np.flatnonzero(real.reshape(-1))),
                             persistent=False)
        self.padded = not real.all()
        joint_dim = sum(self.obs_dims) + sum(self.n_actions)
        self.actors = nn.ModuleList(mlp([d, *self.hidden, a])
                                    for d, a in zip(self.obs_dims, self.n_actions))
        self.critics = nn.ModuleList(mlp([joint_dim, *self.hidden, 1]) for _ in self.obs_dims)
        self.to(self.device)
        self.actor_targets = frozen_copy(self.actors)
        self.critic_targets = frozen_copy(self.critics)
        # one Adam per kind of network: a trainer's step only moves the parameters that got
        # gradients (its own), so this is N independent optimizers in one
        self.actor_optimizer = adam(self.actors.parameters(), self.lr)
        self.critic_optimizer = adam(self.critics.parameters(), self.lr)

    @torch.no_grad()
    def act(self, obs: np.ndarray, step: int | None) -> np.ndarray:
        """Each agent's move from its own observation: a Gumbel-softmax sample when
        exploring, the most likely move otherwise. Shape (n_envs, n_agents)."""
        obs_t = self.obs_tensor(obs)
        moves = []
        for i, actor in enumerate(self.actors):
            logits = actor(self._agent_obs(obs_t, i))
            moves.append((F.gumbel_softmax(logits) if step is not None else logits).argmax(1))
        return torch.stack(moves, dim=1).cpu().numpy()

    def update(self, batch: Batch) -> dict[str, torch.Tensor]:
        i = self.updates % self.n_agents  # the trainer whose turn it is
        actions = self._one_hot(batch.actions)
        with self.timer("target_q"), torch.no_grad():
            next_actions = self._soft_actions(self.actor_targets, batch.next_obs)
            next_q = self.critic_targets[i](self._joint(batch.next_obs, next_actions)).squeeze(1)
            td_target = batch.rewards[:, i] + self.gamma * (1.0 - batch.terminated[:, i]) * next_q

        with self.timer("q_loss"):
            q = self.critics[i](self._joint(batch.obs, actions)).squeeze(1)
            td_error = q - td_target
            critic_loss = _weighted_mse(td_error, batch.weights)
            self.optimize(self.critic_optimizer, critic_loss, self.max_grad_norm)

        with self.timer("p_loss"), frozen(self.critics[i]):
            actor_loss = self._actor_loss(i, batch.obs, actions, self.critics[i])
            self.optimize(self.actor_optimizer, actor_loss, self.max_grad_norm)

        with self.timer("target_update"):
            polyak_update(self.critic_targets[i], self.critics[i], self.tau)
            polyak_update(self.actor_targets[i], self.actors[i], self.tau)
        self.updates += 1
        return self._metrics(critic_loss, actor_loss, q, td_error, batch)

    def _actor_loss(self, i: int, obs: torch.Tensor, actions: list[torch.Tensor],
                    critic: nn.Module) -> torch.Tensor:
        """-Q_i with agent i's action from its policy (a soft Gumbel-softmax sample), the
        others' from the batch, plus openai/maddpg's small penalty on the logits."""
        logits = self.actors[i](self._agent_obs(obs, i))
        own = [*actions[:i], F.gumbel_softmax(logits), *actions[i + 1:]]
        return -critic(self._joint(obs, own)).mean() + self.policy_reg * logits.pow(2).mean()

    def _metrics(self, critic_loss: torch.Tensor, actor_loss: torch.Tensor, q: torch.Tensor,
                 td_error: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        metrics = {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach(),
                   "q_mean": q.detach().mean()}
        if batch.weights is not None:
            metrics["td_errors"] = td_error.detach()
        return metrics

    def _agent_obs(self, obs: torch.Tensor, i: int) -> torch.Tensor:
        return obs[:, i, : self.obs_dims[i]]

    def _one_hot(self, actions: torch.Tensor) -> list[torch.Tensor]:
        return [F.one_hot(actions[:, j], n).float() for j, n in enumerate(self.n_actions)]

    def _soft_actions(self, actors: nn.ModuleList, obs: torch.Tensor) -> list[torch.Tensor]:
        """Every agent's Gumbel-softmax action from `actors` (the critic's action input)."""
        return [F.gumbel_softmax(actor(self._agent_obs(obs, j))) for j, actor in enumerate(actors)]

    def _joint(self, obs: torch.Tensor, actions: list[torch.Tensor]) -> torch.Tensor:
        """The critic's input: every agent's real observation features, then every action."""
        flat = obs.flatten(1)
        return torch.cat([flat[:, self.real] if self.padded else flat, *actions], dim=1)


def _weighted_mse(td_error: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """Mean squared TD error, weighted by importance weights when the batch has them."""
    return weighted_mean(td_error.pow(2), weights)
