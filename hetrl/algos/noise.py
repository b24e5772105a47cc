"""Exploration noise for deterministic policies, in units of the action half-range."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from hetrl.config.enums import Noise


class ActionNoise(nn.Module):
    """Gaussian or Ornstein-Uhlenbeck noise, one process per env.

    OU follows SB3's discretization (theta=0.15, dt=1e-2) so rl-zoo3's `noise_std` means
    the same here; each env's process restarts when its episode ends.
    """

    theta = 0.15
    dt = 1e-2

    def __init__(self, kind: str, std: float, act_dim: int, device: torch.device) -> None:
        super().__init__()
        self.kind = Noise(kind)
        self.std = std
        self.act_dim = act_dim
        self.device = device
        self.state: torch.Tensor | None = None  # OU state, shape (n_envs, act_dim)

    def sample(self, n_envs: int) -> torch.Tensor:
        if self.kind is Noise.none:
            return torch.zeros(n_envs, self.act_dim, device=self.device)
        white = torch.randn(n_envs, self.act_dim, device=self.device) * self.std
        if self.kind is Noise.normal:
            return white
        if self.state is None or self.state.shape[0] != n_envs:
            self.state = torch.zeros(n_envs, self.act_dim, device=self.device)
        self.state = self.state - self.theta * self.state * self.dt + white * np.sqrt(self.dt)
        return self.state

    def get_extra_state(self) -> torch.Tensor | None:  # saved in the learner's state_dict
        return self.state

    def set_extra_state(self, state: torch.Tensor | None) -> None:
        self.state = state

    def reset(self, done: np.ndarray) -> None:
        if self.state is not None:
            self.state[torch.as_tensor(done, device=self.device)] = 0.0
