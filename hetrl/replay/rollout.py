"""The on-policy rollout: n_steps × n_envs transitions, their GAE advantages and returns."""

from __future__ import annotations

from typing import Iterator

import gymnasium as gym
import torch

from hetrl.algos.base import RolloutBatch


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    final_values: torch.Tensor,
    last_values: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> torch.Tensor:
    """Generalized advantage estimates (Schulman et al. 2016) of a [T, N] rollout.

    After step t the next state's value is 0 if the episode terminated, `final_values[t]`
    (V of the true last observation) if it was truncated, `values[t + 1]` otherwise, and
    `last_values` after the last step. Advantages never flow across an episode's end.
    """
    next_values = torch.cat([values[1:], last_values.unsqueeze(0)])
    next_values = torch.where(truncated, final_values, next_values)
    next_values = torch.where(terminated, torch.zeros_like(next_values), next_values)
    deltas = rewards + gamma * next_values - values
    carry = gamma * gae_lambda * (~(terminated | truncated)).float()
    advantages = torch.empty_like(deltas)
    running = torch.zeros_like(last_values)
    for t in reversed(range(len(deltas))):
        running = deltas[t] + carry[t] * running
        advantages[t] = running
    return advantages


class RolloutBuffer:
    """Preallocated tensors on the learner's device, filled step by step, read once.

    `finish` computes advantages and returns; `minibatches` then yields the flattened
    rollout in a random order (torch's generator: seeded and checkpointed with the run).
    """

    def __init__(self, n_steps: int, n_envs: int, obs_space: gym.Space, act_space: gym.Space,
                 device: torch.device) -> None:
        discrete = isinstance(act_space, gym.spaces.Discrete)
        act_shape, act_dtype = ((), torch.long) if discrete else (act_space.shape, torch.float32)

        def zeros(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.zeros((n_steps, n_envs, *shape), dtype=dtype, device=device)

        self.n_steps = n_steps
        self.obs = zeros(*obs_space.shape)
        self.actions = zeros(*act_shape, dtype=act_dtype)
        self.log_probs, self.values, self.rewards, self.final_values = (zeros() for _ in range(4))
        self.terminated, self.truncated = zeros(dtype=torch.bool), zeros(dtype=torch.bool)
        self.advantages, self.returns = zeros(), zeros()
        self.pos = 0

    def full(self) -> bool:
        return self.pos == self.n_steps

    def add(self, obs: torch.Tensor, actions: torch.Tensor, log_probs: torch.Tensor,
            values: torch.Tensor, rewards: torch.Tensor, terminated: torch.Tensor,
            truncated: torch.Tensor, final_values: torch.Tensor) -> None:
        """One step of every env; `final_values` is read only where `truncated`."""
        t = self.pos
        self.obs[t], self.actions[t], self.log_probs[t], self.values[t] = (
            obs, actions, log_probs, values)
        self.rewards[t], self.terminated[t], self.truncated[t] = rewards, terminated, truncated
        self.final_values[t] = final_values
        self.pos += 1

    def finish(self, last_values: torch.Tensor, gamma: float, gae_lambda: float) -> None:
        """Advantages and returns, given V of the observations after the last step."""
        self.advantages = gae(self.rewards, self.values, self.terminated, self.truncated,
                              self.final_values, last_values, gamma, gae_lambda)
        self.returns = self.advantages + self.values
        self.pos = 0

    def minibatches(self, batch_size: int) -> Iterator[torch.Tensor]:
        """Index tensors of one epoch over the flattened rollout; the last one may be short."""
        order = torch.randperm(self.obs.shape[0] * self.obs.shape[1], device=self.obs.device)
        return iter(order.split(batch_size))

    def batch(self, indices: torch.Tensor) -> RolloutBatch:
        def take(x: torch.Tensor) -> torch.Tensor:
            return x.flatten(0, 1)[indices]

        return RolloutBatch(take(self.obs), take(self.actions), take(self.log_probs),
                            take(self.values), take(self.advantages), take(self.returns))
