"""A2C (Mnih et al. 2016, synchronous variant as in SB3): separate actor and critic MLPs,
GAE advantages, one gradient step per rollout (one batch of the whole rollout, one epoch)
on policy loss + value loss − entropy bonus.
"""

from __future__ import annotations

from typing import Iterable

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from hetrl.algos.base import OnPolicyLearner, RolloutBatch
from hetrl.algos.networks import StochasticPolicy, network
from hetrl.algos.rule import Metrics, Stage
from hetrl.config.enums import ActionSpace, Agents
from hetrl.partition.graph import TaskGraph
from hetrl.partition.steps import policy_gradient_step_graph


class A2C(OnPolicyLearner):
    def __init__(
        self,
        obs_space: gym.Space,
        act_space: gym.Space,
        *,
        ent_coef: float,
        vf_coef: float,
        max_grad_norm: float,
        normalize_advantage: bool,
        **common,
    ) -> None:
        super().__init__(**common)
        self.ent_coef, self.vf_coef = ent_coef, vf_coef
        self.max_grad_norm = max_grad_norm
        self.normalize_advantage = normalize_advantage
        self.obs_shape = tuple(obs_space.shape)
        self.actor = StochasticPolicy(obs_space, self.policy_hidden, act_space).to(self.device)
        self.critic = network(obs_space, self.hidden, 1, activation=torch.nn.Tanh).to(self.device)
        self.optimizer = self.make_optimizer([*self.actor.parameters(), *self.critic.parameters()])
        box = isinstance(act_space, gym.spaces.Box)
        self.low, self.high = (act_space.low, act_space.high) if box else (None, None)

    @classmethod
    def supports(cls, space: ActionSpace, agents: Agents = Agents.single) -> bool:
        return agents == cls.agents  # any action space: a Categorical or Gaussian policy

    def make_optimizer(self, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
        """SB3's A2C optimizer: RMSprop with alpha 0.99, eps 1e-5."""
        return torch.optim.RMSprop(params, lr=self.lr, alpha=0.99, eps=1e-5)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1).float()

    @torch.no_grad()
    def explore(self, obs: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        obs_t = self.obs_tensor(obs)
        dist = self.actor.distribution(obs_t)
        actions = dist.sample()
        return actions, dist.log_prob(actions), self.value(obs_t)

    def env_actions(self, actions: torch.Tensor) -> np.ndarray:
        """Actions as the env takes them: Box actions clipped to the bounds."""
        actions = actions.cpu().numpy()
        return actions if self.low is None else np.clip(actions, self.low, self.high)

    @torch.no_grad()
    def act(self, obs: np.ndarray, step: int | None) -> np.ndarray:
        if step is None:
            return self.env_actions(self.actor.mode(self.obs_tensor(obs)))
        return self.env_actions(self.explore(obs)[0])

    def task_graph(self, batch_size: int) -> TaskGraph:
        """One `update` as a task graph."""
        return policy_gradient_step_graph(batch_size, self.obs_shape, self.actor,
                                          self.critic)

    def stages(self) -> list[Stage]:
        return [Stage("optimizer", self.loss, self.max_grad_norm)]

    def loss(self, batch: RolloutBatch, count: object) -> tuple[torch.Tensor, Metrics]:
        """The policy loss plus the value loss, minus the entropy bonus."""
        dist = self.actor.distribution(batch.obs)
        policy_loss, metrics = self.policy_loss(dist, batch)
        entropy = dist.entropy().mean()
        value_loss = F.mse_loss(self.value(batch.obs), batch.returns)
        loss = policy_loss + self.vf_coef * value_loss - self.ent_coef * entropy
        return loss, {"policy_loss": policy_loss.detach(), "value_loss": value_loss.detach(),
                      "entropy": entropy.detach(), **metrics}

    def policy_loss(self, dist: torch.distributions.Distribution,
                    batch: RolloutBatch) -> tuple[torch.Tensor, Metrics]:
        """The policy-gradient loss of the policy's distribution `dist` on the batch."""
        return -(self.advantages(batch) * dist.log_prob(batch.actions)).mean(), {}

    def advantages(self, batch: RolloutBatch) -> torch.Tensor:
        """The batch's advantages, normalized over it with `normalize_advantage`."""
        advantages = batch.advantages
        if self.normalize_advantage:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        return advantages
