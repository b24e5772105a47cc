"""The host's replay manager timed, for PEARL's composer on `platform=host` (Algorithm 2's
M, specs/ap-drl-pearl.md §B.2.8): its three operations on the project's one sum tree
(`hetrl.replay.sumtree.SumTree`, as `replay=prioritized` runs them), on a tree of the
composer's capacity and fanout filled with random priorities. The tree runs on the host's
CPU only: the project has no replay manager on an accelerator."""

from __future__ import annotations

from time import perf_counter
from typing import Callable

import numpy as np

from hetrl.replay.sumtree import SumTree

REPEATS = 20  # timed calls of each operation, after two untimed ones; the median counts


def rm_seconds(capacity: int, fanout: int, batch_size: int, insert_batch: int) -> np.ndarray:
    """Seconds of the RM's sample (stratified draws and the retrieval of their priorities,
    for the importance weights), insert (`insert_batch` new leaves) and update (a batch's
    new priorities), each the median of `REPEATS` calls."""
    rng = np.random.default_rng(0)
    tree = SumTree(capacity, fanout)
    tree.set(np.arange(capacity), rng.random(capacity))
    idx = rng.integers(capacity, size=batch_size)
    ins = rng.integers(capacity, size=insert_batch)

    def sample() -> None:
        tree.get(tree.stratified(rng.random(batch_size)))

    return np.array([_median(sample), _median(lambda: tree.set(ins, rng.random(insert_batch))),
                     _median(lambda: tree.set(idx, rng.random(batch_size)))])


def _median(fn: Callable[[], object]) -> float:
    samples = []
    for _ in range(REPEATS + 2):
        start = perf_counter()
        fn()
        samples.append(perf_counter() - start)
    return float(np.median(samples[2:]))
