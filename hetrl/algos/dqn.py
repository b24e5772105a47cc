"""DQN (Mnih et al. 2015) with an optional double-DQN target (van Hasselt et al. 2016)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from hetrl.algos.base import Batch, OffPolicyLearner, weighted_mean, with_td_errors
from hetrl.algos.networks import adam, frozen_copy, network
from hetrl.algos.rule import Metrics, Stage, TargetSync, every
from hetrl.config.enums import ActionSpace
from hetrl.partition.graph import TaskGraph
from hetrl.partition.steps import dqn_step_graph

TD_LOSSES = {"huber": F.smooth_l1_loss, "mse": F.mse_loss}
"""`algo.td_loss`: SB3's Huber loss, or CleanRL's squared error (CleanRL's DQN-CartPole
recipe diverged here with Huber and learns with it)."""


class DQN(OffPolicyLearner):
    action_space = ActionSpace.discrete
    policy_attr = "q"

    def __init__(
        self,
        obs_space: gym.Space,
        act_space: gym.spaces.Discrete,
        *,
        double_dqn: bool,
        target_update_interval: int,
        exploration_fraction: float,
        exploration_initial_eps: float,
        exploration_final_eps: float,
        max_grad_norm: float,
        td_loss: str,
        total_steps: int,
        cnn: str,
        **common,
    ) -> None:
        super().__init__(**common)
        self.double_dqn = double_dqn
        self.target_update_interval = target_update_interval
        self.eps_start, self.eps_end = exploration_initial_eps, exploration_final_eps
        self.exploration_steps = max(1, int(exploration_fraction * total_steps))
        self.max_grad_norm = max_grad_norm
        self.td_loss = TD_LOSSES[td_loss]
        self.n_actions = int(act_space.n)
        self.obs_shape = tuple(obs_space.shape)
        self.q = network(obs_space, self.policy_hidden, self.n_actions, cnn=cnn).to(self.device)
        self.q_target = frozen_copy(self.q)
        self.optimizer = adam(self.q.parameters(), self.lr)

    def epsilon(self, step: int) -> float:
        """Linear decay from the initial to the final epsilon over the exploration steps."""
        fraction = min(1.0, step / self.exploration_steps)
        return self.eps_start + fraction * (self.eps_end - self.eps_start)

    def task_graph(self, batch_size: int) -> TaskGraph:
        """One `update` as a task graph."""
        return dqn_step_graph(self.q, self.q_target, batch_size, self.obs_shape,
                              double_dqn=self.double_dqn)

    @torch.inference_mode()
    def act(self, obs: np.ndarray, step: int | None) -> np.ndarray:
        if step is None:
            return self.q(self.obs_tensor(obs)).argmax(dim=1).cpu().numpy()
        explore = np.random.random(len(obs)) < self.epsilon(step)
        actions = np.random.randint(self.n_actions, size=len(obs))
        if not explore.all():  # the network only where some env acts greedily
            greedy = self.q(self.obs_tensor(obs)).argmax(dim=1).cpu().numpy()
            actions = np.where(explore, actions, greedy)
        return actions

    def stages(self) -> list[Stage]:
        return [Stage("optimizer", self.td_loss_of, self.max_grad_norm)]

    def targets(self) -> list[TargetSync]:
        return [TargetSync("q_target", "q", when=every(self.target_update_interval))]

    def td_loss_of(self, batch: Batch, count: object) -> tuple[torch.Tensor, Metrics]:
        """The TD loss of the online Q-network against the target network's bootstrap."""
        with torch.no_grad():
            next_q = self.q_target(batch.next_obs)
            if self.double_dqn:
                best = self.q(batch.next_obs).argmax(dim=1, keepdim=True)
                next_value = next_q.gather(1, best).squeeze(1)
            else:
                next_value = next_q.max(dim=1).values
            td_target = batch.rewards + self.gamma * (1.0 - batch.terminated) * next_value

        q = self.q(batch.obs).gather(1, batch.actions.long().view(-1, 1)).squeeze(1)
        loss = weighted_mean(self.td_loss(q, td_target, reduction="none"), batch.weights)
        return loss, with_td_errors({"loss": loss.detach(), "q_mean": q.detach().mean()}, batch,
                                    q - td_target)
