"""MADDPG (Lowe et al. 2017) as in openai/maddpg and the MARL paper (extract B.1.2):
decentralized actors, one centralized critic per agent on every agent's observation and
action, Gumbel-softmax actions for discrete moves, Polyak-averaged targets.

The sync scheduler hands over one batch per `update`: an update round is `n_agents`
consecutive updates, each training the next agent's trainer on its own mini-batch, so the
loop samples once per trainer (the paper's O(N²·B) sampling) and times it as `sample`. The
update times its own phases: `target_q`, `q_loss`, `p_loss`, `target_update`.
"""

from __future__ import annotations

from functools import partial

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hetrl.algos.base import Batch, OffPolicyLearner, weighted_mean, with_td_errors
from hetrl.algos.networks import adam, frozen_copy, mlp
from hetrl.algos.rule import Metrics, Stage, TargetSync
from hetrl.config.enums import ActionSpace, Agents


class MADDPG(OffPolicyLearner):
    action_space = ActionSpace.discrete
    agents = Agents.multi
    target_phase = "target_update"

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

    def graph_key(self) -> int:
        """The trainer whose turn it is."""
        return self.updates % self.n_agents

    def stages(self) -> list[Stage]:
        """The critic's step, then the actor's, of the trainer whose turn it is."""
        i = self.graph_key()
        return [Stage("critic_optimizer", partial(self.critic_loss, i), self.max_grad_norm,
                      trains=self.critics_of(i), phase="q_loss"),
                Stage("actor_optimizer", partial(self.actor_loss, i), self.max_grad_norm,
                      frozen=(f"critics.{i}",), trains=(f"actors.{i}",), phase="p_loss")]

    def critics_of(self, i: int) -> tuple[str, ...]:
        """Trainer i's critics (of the critic optimizer's, which holds every trainer's)."""
        return (f"critics.{i}",)

    def targets(self) -> list[TargetSync]:
        i = self.graph_key()
        return [TargetSync(f"critic_targets.{i}", f"critics.{i}", self.tau),
                TargetSync(f"actor_targets.{i}", f"actors.{i}", self.tau)]

    def critic_loss(self, i: int, batch: Batch, count: object) -> tuple[torch.Tensor, Metrics]:
        """Trainer i's squared TD error against its target critic's bootstrap of every
        agent's target actions."""
        with self.timer("target_q"), torch.no_grad():
            next_actions = self._soft_actions(self.actor_targets, batch.next_obs)
            next_q = self.critic_targets[i](self._joint(batch.next_obs, next_actions)).squeeze(1)
            td_target = batch.rewards[:, i] + self.gamma * (1.0 - batch.terminated[:, i]) * next_q
        with self.timer("q_loss"):
            q = self.critics[i](self._joint(batch.obs, self._one_hot(batch.actions))).squeeze(1)
            return self._critic_metrics(q - td_target, q, batch)

    def actor_loss(self, i: int, batch: Batch, count: object) -> tuple[torch.Tensor, Metrics]:
        """-Q_i with agent i's action from its policy (a soft Gumbel-softmax sample), the
        others' from the batch, plus openai/maddpg's small penalty on the logits."""
        with self.timer("p_loss"):
            actions = self._one_hot(batch.actions)
            logits = self.actors[i](self._agent_obs(batch.obs, i))
            own = [*actions[:i], F.gumbel_softmax(logits), *actions[i + 1:]]
            loss = (-self.critics[i](self._joint(batch.obs, own)).mean()
                    + self.policy_reg * logits.pow(2).mean())
            return loss, {"actor_loss": loss.detach()}

    def _critic_metrics(self, td_error: torch.Tensor, q: torch.Tensor,
                        batch: Batch, *others: torch.Tensor) -> tuple[torch.Tensor, Metrics]:
        """The critic loss of TD errors `td_error` (and of `others`, a twin critic's) and its
        metrics: the mean squared TD error, weighted by importance weights when the batch has
        them."""
        loss = sum((weighted_mean(e.pow(2), batch.weights) for e in others),
                   weighted_mean(td_error.pow(2), batch.weights))
        return loss, with_td_errors({"critic_loss": loss.detach(), "q_mean": q.detach().mean()},
                                    batch, td_error)

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

