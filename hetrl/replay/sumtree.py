"""A sum tree in numpy: set leaf values and find leaves by prefix sum, a batch at a time."""

from __future__ import annotations

import numpy as np


class SumTree:
    """Leaves hold non-negative values; each inner node the sum of its two children.

    `tree[1]` is the root and the leaves start at `tree[leaves]`, a power of two, so a
    batch of updates or searches walks the levels together: O(batch × log capacity) numpy
    work, no Python loop over the batch.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.leaves = 1 << max(0, (capacity - 1).bit_length())
        self.depth = self.leaves.bit_length() - 1
        self.tree = np.zeros(2 * self.leaves, dtype=np.float64)

    @property
    def total(self) -> float:
        return float(self.tree[1])

    def get(self, idx: np.ndarray) -> np.ndarray:
        return self.tree[self.leaves + idx]

    def set(self, idx: np.ndarray, values: np.ndarray) -> None:
        """Leaf `idx[k]` becomes `values[k]` (the last one wins for a repeated index)."""
        nodes = self.leaves + np.asarray(idx)
        self.tree[nodes] = values
        for _ in range(self.depth):  # a repeated parent gets the same sum each time
            nodes = nodes >> 1
            self.tree[nodes] = self.tree[2 * nodes] + self.tree[2 * nodes + 1]

    def find(self, prefix: np.ndarray) -> np.ndarray:
        """For each value u in [0, total), the leaf i whose cumulative range holds u."""
        u = np.array(prefix, dtype=np.float64)
        nodes = np.ones(len(u), dtype=np.int64)
        for _ in range(self.depth):
            left = 2 * nodes
            right = u >= self.tree[left]
            u -= np.where(right, self.tree[left], 0.0)
            nodes = left + right
        # rounding can step onto an empty leaf past the last stored one: take the last
        return np.minimum(nodes - self.leaves, self.capacity - 1)
