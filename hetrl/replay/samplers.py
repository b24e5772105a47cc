"""Mini-batch samplers: which replay slots a batch holds, and their importance weights.

A sampler knows nothing of how transitions are stored; it returns slot indices into a ring
of `size` filled slots, so any sampler works with any layout (hetrl.replay.multiagent). Each
is one option of `conf/replay/sampler/`, built by Hydra and handed to the replay.
Random draws use numpy's global generator, as UniformReplay does: seeded runs repeat and a
checkpoint (which saves that generator) resumes them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hetrl.replay.sumtree import SumTree


def windows(starts: np.ndarray, lengths: np.ndarray | int, size: int) -> np.ndarray:
    """The slots of contiguous windows [start, start + length), wrapping modulo `size`
    (the ring's seam), concatenated."""
    lengths = np.broadcast_to(lengths, starts.shape)
    total = int(lengths.sum())
    offsets = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return (np.repeat(starts, lengths) + offsets) % size


class UniformSampler:
    """Each slot of the batch is drawn uniformly (openai/maddpg's common index array)."""

    def sample(self, n: int, size: int) -> tuple[np.ndarray, np.ndarray | None]:
        return np.random.randint(size, size=n), None

    def added(self, slots: np.ndarray) -> None:
        """New transitions went into `slots`."""

    def update(self, slots: np.ndarray, td_errors: np.ndarray) -> None:
        """New TD errors of sampled slots (prioritized samplers)."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class LocalitySampler(UniformSampler):
    """Cache-locality-aware sampling (MARL paper, Algorithm 1): `refs` reference slots
    drawn uniformly, each followed by a window of `neighbors` contiguous slots (itself
    included). Windows wrap at the ring's seam, so every stored slot is equally likely and
    no weights are needed. A batch of k mini-batches (MADDPG's update: one per trainer)
    takes k × `refs` windows."""

    def __init__(self, refs: int, neighbors: int) -> None:
        self.refs, self.neighbors = refs, neighbors

    def sample(self, n: int, size: int) -> tuple[np.ndarray, np.ndarray | None]:
        if n % (self.refs * self.neighbors):
            raise ValueError(f"refs × neighbors = {self.refs * self.neighbors} does not divide "
                             f"batch {n}")
        refs = np.random.randint(size, size=n // self.neighbors)
        return windows(refs, self.neighbors, size), None


class PrioritizedSampler(UniformSampler):
    """Proportional prioritized replay (Schaul et al. 2016): P(i) = p_i^α / Σ p^α with
    p = |TD error| + eps, new transitions at the max priority so far, importance weights
    (N·P(i))^-β over their max, β annealed linearly to `beta_final` over `beta_anneal`
    sample calls. The priorities p^α sit in an F-ary sum tree (`fanout`; 2 is the binary
    tree the MARL samplers always had). `stratified`: one draw in each of n equal segments
    of the total (PEARL's artifact, Schaul et al.); otherwise n independent draws."""

    def __init__(self, capacity: int, alpha: float, beta: float, beta_final: float,
                 beta_anneal: int, eps: float, fanout: int = 2,
                 stratified: bool = False) -> None:
        self.tree = SumTree(capacity, fanout)
        self.stratified = stratified
        self.priority = np.zeros(capacity, dtype=np.float64)  # p_i, before the exponent α
        self.alpha, self.eps = alpha, eps
        self.beta0, self.beta_final, self.beta_anneal = beta, beta_final, beta_anneal
        self.max_priority = 1.0
        self.calls = 0

    @property
    def beta(self) -> float:
        progress = min(1.0, self.calls / self.beta_anneal)
        return self.beta0 + progress * (self.beta_final - self.beta0)

    def _references(self, n: int, size: int) -> np.ndarray:
        """n slots drawn with probability proportional to p^α (slots past `size` hold
        none, so they are never drawn)."""
        if self.stratified:
            return self.tree.stratified(np.random.random(n))
        return self.tree.find(np.random.random(n) * self.tree.total)

    def _weights(self, refs: np.ndarray, size: int) -> np.ndarray:
        """Lemma 1 / PER: w = ((1/N)·(1/P))^β, normalized by the batch's max."""
        return self.tree.importance(refs, size, self.beta)

    def sample(self, n: int, size: int) -> tuple[np.ndarray, np.ndarray | None]:
        if self.stratified:
            idx, weights = self.tree.weighted_stratified(np.random.random(n), size, self.beta)
        else:
            idx = self._references(n, size)
            weights = self._weights(idx, size)
        self.calls += 1
        return idx, weights

    def added(self, slots: np.ndarray) -> None:
        self._set(slots, np.full(len(slots), self.max_priority))

    def update(self, slots: np.ndarray, td_errors: np.ndarray) -> None:
        # `slots` may be empty (PEARL's collision check dropped every row): 0 comes back
        top = self.tree.set_priorities(slots, td_errors, self.eps, self.alpha, self.priority)
        self.max_priority = max(self.max_priority, top)

    def _set(self, slots: np.ndarray, priority: np.ndarray) -> None:
        """Slots at priorities p as they are (|p| + 0 = p): the tree's p^α computed as an
        update computes it, so a resumed tree is the saved one bit for bit."""
        self.tree.set_priorities(slots, priority, 0.0, self.alpha, self.priority)

    def state_dict(self) -> dict[str, Any]:
        return {"priority": self.priority.copy(), "max_priority": self.max_priority,
                "calls": self.calls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.max_priority, self.calls = state["max_priority"], state["calls"]
        stored = np.flatnonzero(state["priority"])
        self._set(stored, state["priority"][stored])


class PrioritizedLocalitySampler(PrioritizedSampler):
    """Information-prioritized locality-aware sampling (MARL paper §B.1.6): reference slots
    drawn as in PER; each brings a window whose length grows with its priority normalized
    by the max (`neighbor_counts` split by `thresholds`: 1/2/4 at 0.33/0.66), until the batch
    is full. A window member is weighted by its reference's probability (Lemma 1 with
    P(i) = P(ref(i)), extract E.2)."""

    def __init__(self, thresholds: list[float], neighbor_counts: list[int], **per: Any) -> None:
        super().__init__(**per)
        self.thresholds = np.array(list(thresholds), dtype=np.float64)
        self.counts = np.array(list(neighbor_counts), dtype=np.int64)

    def window_lengths(self, refs: np.ndarray) -> np.ndarray:
        """p < T1 -> N1, T1 <= p <= T2 -> N2, p > T2 -> N3 (for p = priority / max)."""
        p = self.priority[refs] / self.max_priority
        bucket = np.searchsorted(self.thresholds[:-1], p, side="right") + (p > self.thresholds[-1])
        return self.counts[bucket]

    def sample(self, n: int, size: int) -> tuple[np.ndarray, np.ndarray | None]:
        refs_parts, length_parts, filled = [], [], 0
        per_ref = float(self.counts.max())  # a first guess of the mean window, then the seen one
        while filled < n:  # a few rounds, each drawing about as many references as still fit
            refs = self._references(max(1, int(np.ceil((n - filled) / per_ref))), size)
            lengths = self.window_lengths(refs)
            refs_parts.append(refs)
            length_parts.append(lengths)
            filled += int(lengths.sum())
            per_ref = float(lengths.mean())
        refs, lengths = np.concatenate(refs_parts), np.concatenate(length_parts)
        idx = windows(refs, lengths, size)[:n]
        weights = self._weights(np.repeat(refs, lengths)[:n], size)
        self.calls += 1
        return idx, weights

