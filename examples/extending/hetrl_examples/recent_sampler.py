"""A sampler added from outside hetrl (docs/extending.md, "A sampler"): each batch is drawn
uniformly from the `window` newest transitions only, a recency-biased replay."""

from __future__ import annotations

from typing import Any

import numpy as np

from hetrl.replay.samplers import UniformSampler


class RecentSampler(UniformSampler):
    """Samplers return slot indices into a ring of `size` filled slots; `added` tells them
    which slots new transitions went to, so this one keeps the newest."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.newest = -1  # the slot of the newest transition

    def added(self, slots: np.ndarray) -> None:
        self.newest = int(slots[-1])

    def sample(self, n: int, size: int) -> tuple[np.ndarray, np.ndarray | None]:
        back = np.random.randint(min(self.window, size), size=n)  # how far behind the newest
        return (self.newest - back) % size, None  # no importance weights: not prioritized

    def state_dict(self) -> dict[str, Any]:
        return {"newest": self.newest}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.newest = state["newest"]
