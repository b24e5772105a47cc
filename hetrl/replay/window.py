"""MiniGo's training window (spec C.1.1): the positions of the last generations of self-play,
what the update step samples for AlphaZero."""

from __future__ import annotations

import numpy as np
import torch

from hetrl.algos.alphazero import PositionBatch

Generation = tuple[int, np.ndarray, np.ndarray, np.ndarray]
"""(generation, planes, pis, zs): one generation's positions, as the loop checkpoints them."""


class GenerationWindow:
    """The positions of the last `size` generations; `sample(n)` draws min(n, positions)
    rows uniformly, with replacement, from `rng` (`draw`) and reads them (`read`); the
    trainers read it through `hetrl.replay.loader.WindowLoader`, one batch ahead.

    `generations` is the list the loop checkpoints (`SelfPlayProgress.window`); the
    window adds to it and trims it in place, so the checkpoint always holds the window."""

    def __init__(self, size: int, rng: np.random.Generator,
                 generations: list[Generation] | None = None) -> None:
        self.size, self.rng = size, rng
        self.generations = generations if generations is not None else []
        self._concat()

    def add(self, generation: Generation) -> None:
        """A new generation's positions in; the oldest out beyond `size` generations."""
        self.generations.append(generation)
        del self.generations[:-self.size]
        self._concat()

    def __len__(self) -> int:
        """Positions in the window."""
        return len(self._zs)

    def sample(self, n: int) -> PositionBatch:
        """A direct read: `read(draw(n))`."""
        return self.read(self.draw(n))

    def draw(self, n: int) -> np.ndarray:
        """The rows of a batch of min(n, positions), drawn from `rng`."""
        return self.rng.integers(len(self), size=min(n, len(self)))

    def read(self, rows: np.ndarray) -> PositionBatch:
        """The positions at `rows`, copied out of the window (safe on another thread: the
        window changes only between generations' training)."""
        return PositionBatch(torch.from_numpy(self._planes[rows]),
                             torch.from_numpy(self._pis[rows]), torch.from_numpy(self._zs[rows]))

    def _concat(self) -> None:
        """The generations' positions as one array each (once a generation, not a batch)."""
        if not self.generations:
            self._planes = self._pis = self._zs = np.zeros(0, np.float32)
            return
        self._planes, self._pis, self._zs = (
            np.concatenate([g[i] for g in self.generations]) for i in (1, 2, 3))
