"""A preallocated ring buffer of transitions with uniform sampling."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from hetrl.algos.base import Batch


class UniformReplay:
    """Fixed-capacity FIFO storage in numpy arrays; batches come out as torch tensors.

    Writes are slice copies (the per-step cost that matters); a sampled batch is one
    fancy-index per column. Indices are drawn with numpy's global generator, so a seeded
    run samples the same batches and a checkpoint (which saves that generator) resumes them.
    """

    def __init__(
        self, capacity: int, obs_space: gym.Space, act_space: gym.Space, device: torch.device
    ) -> None:
        self.capacity = capacity
        self.device = device
        discrete = isinstance(act_space, gym.spaces.Discrete)
        act_shape, act_dtype = ((), np.int64) if discrete else (act_space.shape, np.float32)
        obs_dtype = np.uint8 if obs_space.dtype == np.uint8 else np.float32  # frames stay bytes
        self.obs = np.zeros((capacity, *obs_space.shape), dtype=obs_dtype)
        self.next_obs = np.zeros_like(self.obs)
        self.actions = np.zeros((capacity, *act_shape), dtype=act_dtype)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.dones = np.zeros(capacity, dtype=np.float32)
        self.pos = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def _columns(self) -> tuple[np.ndarray, ...]:
        return self.obs, self.actions, self.rewards, self.next_obs, self.dones

    def add(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: np.ndarray,
        dones: np.ndarray,
    ) -> None:
        """Store a batch of transitions (one per env), overwriting the oldest when full."""
        n = len(obs)
        end = self.pos + n
        for column, values in zip(self._columns(), (obs, actions, rewards, next_obs, dones)):
            if end <= self.capacity:
                column[self.pos : end] = values
            else:  # wraps around the ring
                column[np.arange(self.pos, end) % self.capacity] = values
        self.pos = end % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, n: int) -> Batch:
        idx = np.random.randint(self.size, size=n)
        return Batch(*(torch.from_numpy(column[idx]).to(self.device) for column in self._columns()))

    def state_dict(self) -> dict[str, Any]:
        """The stored transitions (only the filled part) and the ring position."""
        return {"columns": [c[: self.size].copy() for c in self._columns()],
                "pos": self.pos, "size": self.size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pos, self.size = state["pos"], state["size"]
        for column, saved in zip(self._columns(), state["columns"]):
            column[: self.size] = saved
