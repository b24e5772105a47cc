"""Expected SARSA (van Seijen et al. 2009) with a Q-network: an algorithm added from outside
hetrl (docs/extending.md, "An algorithm").

Where DQN bootstraps from the best next action, max_a Q'(s', a), Expected SARSA bootstraps
from the value of the next state under an epsilon-greedy policy,
(1 - eps) max_a Q'(s', a) + eps mean_a Q'(s', a), with eps = `target_epsilon`
(0 gives DQN's target). Q' is a target network copied every `target_update_interval` updates.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from hetrl.algos.base import Batch, OffPolicyLearner
from hetrl.algos.networks import adam, frozen_copy, network
from hetrl.algos.rule import Metrics, Stage, TargetSync, every
from hetrl.config.enums import ActionSpace


class ExpectedSarsa(OffPolicyLearner):
    # the class flags validation reads: a discrete action space (and, by default, a
    # single-agent env); off-policy (OffPolicyLearner), so it trains under scheduler=sync
    action_space = ActionSpace.discrete
    policy_attr = "q"  # the network `act` runs (what actors copy and quantize)

    def __init__(
        self,
        obs_space: gym.Space,
        act_space: gym.spaces.Discrete,
        *,
        target_epsilon: float,
        target_update_interval: int,
        exploration_fraction: float,
        exploration_initial_eps: float,
        exploration_final_eps: float,
        total_steps: int,
        **common,  # the schedule (OffPolicyLearner) and hidden, lr, gamma, device (Learner)
    ) -> None:
        super().__init__(**common)
        self.target_epsilon = target_epsilon
        self.target_update_interval = target_update_interval
        self.eps_start, self.eps_end = exploration_initial_eps, exploration_final_eps
        self.exploration_steps = max(1, int(exploration_fraction * total_steps))
        self.n_actions = int(act_space.n)
        self.q = network(obs_space, self.policy_hidden, self.n_actions).to(self.device)
        self.q_target = frozen_copy(self.q)
        self.optimizer = adam(self.q.parameters(), self.lr)

    def epsilon(self, step: int) -> float:
        """Exploration: linear decay from the initial to the final epsilon."""
        fraction = min(1.0, step / self.exploration_steps)
        return self.eps_start + fraction * (self.eps_end - self.eps_start)

    @torch.inference_mode()
    def act(self, obs: np.ndarray, step: int | None) -> np.ndarray:
        greedy = self.q(self.obs_tensor(obs)).argmax(dim=1).cpu().numpy()
        if step is None:  # the deterministic policy (evaluation)
            return greedy
        explore = np.random.random(len(obs)) < self.epsilon(step)
        return np.where(explore, np.random.randint(self.n_actions, size=len(obs)), greedy)

    def stages(self) -> list[Stage]:
        return [Stage("optimizer", self.td_loss_of)]  # one Adam step on the TD loss

    def targets(self) -> list[TargetSync]:
        return [TargetSync("q_target", "q", when=every(self.target_update_interval))]

    def td_loss_of(self, batch: Batch, count: object) -> tuple[torch.Tensor, Metrics]:
        with torch.no_grad():
            next_q = self.q_target(batch.next_obs)
            eps = self.target_epsilon
            next_value = (1.0 - eps) * next_q.max(dim=1).values + eps * next_q.mean(dim=1)
            td_target = batch.rewards + self.gamma * (1.0 - batch.terminated) * next_value

        q = self.q(batch.obs).gather(1, batch.actions.long().view(-1, 1)).squeeze(1)
        loss = F.mse_loss(q, td_target)
        return loss, {"loss": loss.detach(), "q_mean": q.detach().mean()}
