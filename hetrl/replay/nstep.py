"""n-step transitions on the add path: (s_t, a_t, sum_k gamma^k r_{t+k}, s_{t+n}, terminated,
gamma^n)."""

from __future__ import annotations

from collections import deque

import numpy as np

Transitions = tuple[np.ndarray, ...]
"""obs, actions, rewards, next_obs, terminated, discounts: one row per transition."""


class NStepAccumulator:
    """Turns the one-step transitions of a vector of envs into n-step ones.

    Each env keeps a window of its last (up to n) steps, each with the discounted reward
    summed so far. A window entry leaves once it spans n steps, bootstrapping from the
    newest next observation with discount gamma^n; when an episode ends every entry
    leaves, with the rewards it has and gamma^k for its k steps (`terminated` set only if the
    episode terminated, so a truncated one still bootstraps from its last observation).
    """

    def __init__(self, n: int, gamma: float, n_envs: int) -> None:
        self.n, self.gamma = n, gamma
        self.windows: list[deque[list]] = [deque() for _ in range(n_envs)]

    def push(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
             next_obs: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> Transitions:
        """One step of every env; returns the n-step transitions it completes."""
        out: list[tuple] = []
        for i, window in enumerate(self.windows):
            window.append([obs[i], actions[i], 0.0, 1.0])  # obs, action, return, discount
            for entry in window:
                entry[2] += entry[3] * float(rewards[i])
                entry[3] *= self.gamma
            ended = bool(terminated[i]) or bool(truncated[i])
            while window and (ended or len(window) == self.n):
                first_obs, action, ret, discount = window.popleft()
                out.append((first_obs, action, ret, next_obs[i], float(terminated[i]), discount))
        if not out:
            return ()
        return tuple(np.stack(column) for column in zip(*out))

    def state_dict(self) -> list[list[list]]:
        return [[list(entry) for entry in window] for window in self.windows]

    def load_state_dict(self, state: list[list[list]]) -> None:
        self.windows = [deque(list(entry) for entry in window) for window in state]
