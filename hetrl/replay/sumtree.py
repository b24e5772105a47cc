"""The project's one sum tree: an F-ary tree of priorities (PEARL's replay manager, spec B.2.2)
with batched retrieval, update, stratified sampling and prioritized replay's priority update
and importance weights, compiled with numba when it is installed and in plain numpy otherwise
(the reference the compiled path is tested against).

Layout: level order in one float64 array; the children of node n are F·n+1 … F·n+F, its
parent (n−1)//F; depth D = ⌈log_F capacity⌉ and the F^D leaves start at (F^D − 1)/(F − 1),
padded past `capacity` with zeros. An update writes the leaf and recomputes each ancestor as
the sum of its children, left to right, so a node is always exactly the sum its children
give (no drift from adding differences, and an empty subtree sums to exactly 0).

Sampling (Eq. (1), 0-based, x ~ U[0, total)): at each level take the first child whose
running prefix sum exceeds the remaining x and subtract the prefix before it. A leaf owns
the half-open range [c_{i−1}, c_i) of the cumulative sums, so a leaf of priority 0 is never
drawn; for x off those boundaries this is `searchsorted(cumsum, x, 'left')`. Should rounding
carry x past a node's children, the last child holding any priority is taken (all the way
down): a leaf of priority 0 is never returned.

Both paths run the same arithmetic in the same order, so they give bit-identical trees and
samples (tests/test_sumtree.py).
"""

from __future__ import annotations

import importlib.util
import math
import time
from functools import cache
from types import SimpleNamespace

import numpy as np

COMPILED = importlib.util.find_spec("numba") is not None
"""Whether numba is installed (`SumTree(compiled=None)` uses its kernels if so; it is a
dependency, and the numpy path alone keeps a bare env working)."""


# ---- numpy: the reference --------------------------------------------------------------


def _set_numpy(tree: np.ndarray, offset: int, fanout: int, idx: np.ndarray,
               values: np.ndarray) -> None:
    nodes = offset + idx
    tree[nodes] = values  # a repeated index: the last value wins
    lanes = np.arange(1, fanout + 1)
    while nodes[0] > 0:  # every node of a level is at the same depth
        nodes = np.unique((nodes - 1) // fanout)
        children = nodes[:, None] * fanout + lanes
        total = np.zeros(len(nodes))
        for j in range(fanout):  # left to right, as the compiled loop adds
            total += tree[children[:, j]]
        tree[nodes] = total


def _find_numpy(tree: np.ndarray, fanout: int, depth: int, x: np.ndarray) -> np.ndarray:
    u = np.array(x, dtype=np.float64)
    nodes = np.zeros(len(u), dtype=np.int64)
    lanes = np.arange(1, fanout + 1)
    rows = np.arange(len(u))
    for _ in range(depth):
        children = tree[nodes[:, None] * fanout + lanes]  # (n, F)
        prefix = np.cumsum(children, axis=1)  # sequential, as the compiled loop
        past = u[:, None] >= prefix
        j = past.sum(axis=1)  # the first child whose prefix exceeds u (prefixes never fall)
        over = j == fanout  # rounding ran past every child: the last one holding any
        j[over] = fanout - 1 - np.argmax(children[over, ::-1] > 0, axis=1)
        before = np.where(j > 0, prefix[rows, np.maximum(j - 1, 0)], 0.0)
        u = np.where(over, np.inf, u - before)
        nodes = nodes * fanout + 1 + j
    return nodes


def _pow(x: np.ndarray, exponent: float) -> np.ndarray:
    """x ** exponent as the compiled kernels compute it, libm's pow element by element:
    numpy's SIMD power differs from it in the last bit of ~5 % of values on AVX-512."""
    return np.array([math.pow(v, exponent) for v in x.tolist()], dtype=np.float64)


# ---- numba: the compiled path ------------------------------------------------------------


def _set_loop(tree: np.ndarray, offset: int, fanout: int, idx: np.ndarray,
              values: np.ndarray) -> None:
    for k in range(len(idx)):
        node = offset + idx[k]
        tree[node] = values[k]
        while node > 0:
            node = (node - 1) // fanout
            first = node * fanout + 1
            total = 0.0
            for c in range(first, first + fanout):
                total += tree[c]
            tree[node] = total


def _find_loop(tree: np.ndarray, fanout: int, depth: int, x: np.ndarray,
               out: np.ndarray) -> None:
    """Level by level over the batch (not sample by sample): the walks are independent, so
    the CPU overlaps their memory reads. Nodes of F ≤ 16 count the children passed
    without a branch (no mispredictions); wide ones stop at the chosen child (half the reads
    on average). Both give the same child and the same remainder."""
    n = len(x)
    u = x.copy()
    out[:] = 0
    scan = fanout > 16
    for _ in range(depth):
        for k in range(n):
            first = out[k] * fanout + 1
            uk = u[k]
            prefix = 0.0
            before = 0.0
            j = 0
            if scan:
                while j < fanout:
                    after = prefix + tree[first + j]
                    if uk < after:
                        break
                    prefix = after
                    j += 1
                before = prefix
            else:
                for c in range(first, first + fanout):
                    prefix += tree[c]
                    past = uk >= prefix
                    j += past
                    before = prefix if past else before
            if j == fanout:  # rounding ran past every child: the last one holding any
                j = fanout - 1
                while j >= 0 and tree[first + j] <= 0:
                    j -= 1
                if j < 0:  # none holds any (an empty tree): the last, as numpy's
                    j = fanout - 1
                u[k] = np.inf
            else:
                u[k] = uk - before
            out[k] = first + j


def _stratified_loop(tree: np.ndarray, fanout: int, depth: int, draws: np.ndarray,
                     out: np.ndarray) -> None:
    """Stratum k of n: x = (k + draws[k]) · total / n."""
    n = len(draws)
    x = np.empty(n)
    for k in range(n):
        x[k] = (k + draws[k]) * tree[0] / n
    _find_jit(tree, fanout, depth, x, out)


def _importance_loop(tree: np.ndarray, offset: int, leaves: np.ndarray, n: int, beta: float,
                     out: np.ndarray) -> None:
    """out[k] = (n · P(leaf k))^-β over the largest of them, P = priority / total."""
    total = tree[0]
    w = np.empty(len(leaves))
    top = 0.0
    for k in range(len(leaves)):
        w[k] = (n * (tree[offset + leaves[k]] / total)) ** -beta
        top = max(top, w[k])
    for k in range(len(leaves)):
        out[k] = w[k] / top


def _weighted_stratified_loop(tree: np.ndarray, fanout: int, depth: int, offset: int,
                              draws: np.ndarray, n: int, beta: float, leaves: np.ndarray,
                              weights: np.ndarray) -> None:
    """`_stratified_loop`'s leaves and `_importance_loop`'s weights of them, in one call."""
    _stratified_jit(tree, fanout, depth, draws, leaves)
    for k in range(len(leaves)):
        leaves[k] -= offset
    _importance_jit(tree, offset, leaves, n, beta, weights)


def _priorities_loop(tree: np.ndarray, offset: int, fanout: int, idx: np.ndarray,
                     errors: np.ndarray, eps: float, alpha: float, raw: np.ndarray) -> float:
    """p = |error| + ε into raw[idx[k]] and p^α into leaf idx[k]; the largest p."""
    values = np.empty(len(idx))
    top = 0.0
    for k in range(len(idx)):
        p = abs(np.float64(errors[k])) + eps
        raw[idx[k]] = p
        values[k] = p ** alpha
        top = max(top, p)
    _set_jit(tree, offset, fanout, idx, values)
    return top


_find_jit = None  # the jitted _find_loop, which the jitted _stratified_loop calls
_set_jit = None  # the jitted _set_loop, which the jitted _priorities_loop calls
_stratified_jit = None  # the jitted loops that _weighted_stratified_loop calls
_importance_jit = None


@cache
def _kernels() -> SimpleNamespace:
    """The jitted kernels, made on first use (importing numba takes a few tenths of a
    second; a process whose trees stay in numpy never pays it). `cache=True`: compiled
    once, then loaded from numba's cache (`__pycache__`, or NUMBA_CACHE_DIR) by every
    process."""
    global _find_jit, _set_jit, _stratified_jit, _importance_jit
    import numba

    jit = numba.njit(cache=True, nogil=True)
    _find_jit, _set_jit = jit(_find_loop), jit(_set_loop)
    _stratified_jit, _importance_jit = jit(_stratified_loop), jit(_importance_loop)
    return SimpleNamespace(set=_set_jit, find=_find_jit, stratified=_stratified_jit,
                           importance=_importance_jit, priorities=jit(_priorities_loop),
                           weighted_stratified=jit(_weighted_stratified_loop))


def compile_kernels() -> float:
    """Compile (or load from numba's cache: about 0.6 s here, numba's import included) the
    kernels for the tree's array types; the seconds it took. A compiled tree calls it when it
    is made, so a loop's first insert or sample does not pay it."""
    start = time.perf_counter()
    if COMPILED:
        kernels = _kernels()
        tree = np.zeros(3)
        idx, out = np.zeros(1, np.int64), np.zeros(1, np.int64)
        kernels.set(tree, 1, 2, idx, np.ones(1))
        kernels.find(tree, 2, 1, np.zeros(1), out)
        kernels.stratified(tree, 2, 1, np.zeros(1), out)
        kernels.importance(tree, 1, idx, 1, 0.5, np.zeros(1, np.float32))
        kernels.weighted_stratified(tree, 2, 1, 1, np.zeros(1), 1, 0.5, out,
                                    np.zeros(1, np.float32))
        for errors in (np.ones(1, np.float32), np.ones(1)):  # TD errors; stored priorities
            kernels.priorities(tree, 1, 2, idx, errors, 0.0, 0.6, np.zeros(1))
    return time.perf_counter() - start


# ---- the tree ------------------------------------------------------------------------------


class SumTree:
    """Priorities of `capacity` slots in an F-ary sum tree (`fanout` F ≥ 2).

    `set` (batched update; insertion is the same write), `get` (batched retrieval), `find`
    (leaves by prefix sum) and `stratified` (one draw per stratum of the total) take and
    return numpy arrays. `compiled`: the numba kernels (True), the numpy reference (False),
    or numba when installed (None).
    """

    def __init__(self, capacity: int, fanout: int = 2, compiled: bool | None = None) -> None:
        if capacity < 1 or fanout < 2:
            raise ValueError(f"capacity {capacity} (>= 1) and fanout {fanout} (>= 2)")
        if compiled and not COMPILED:
            raise ImportError("SumTree(compiled=True) needs numba: pip install numba")
        self.capacity, self.fanout = capacity, fanout
        self.compiled = COMPILED if compiled is None else compiled
        self.depth, self.leaves = 0, 1
        while self.leaves < capacity:  # D = ⌈log_F capacity⌉, in integers
            self.depth += 1
            self.leaves *= fanout
        self.offset = (self.leaves - 1) // (fanout - 1)  # the first leaf's node
        self.tree = np.zeros(self.offset + self.leaves, dtype=np.float64)
        if self.compiled:  # here, where a job is built, not in its first timed insert
            compile_kernels()

    @property
    def total(self) -> float:
        return float(self.tree[0])

    def get(self, idx: np.ndarray) -> np.ndarray:
        """The leaves' priorities (retrieval)."""
        return self.tree[self.offset + np.asarray(idx)]

    def set(self, idx: np.ndarray, values: np.ndarray) -> None:
        """Leaf `idx[k]` becomes `values[k]` (≥ 0; the last one wins for a repeated index),
        and every ancestor the sum of its children (update; insertion is the same write)."""
        idx = np.ascontiguousarray(idx, dtype=np.int64)
        values = np.ascontiguousarray(values, dtype=np.float64)
        if len(idx) == 0:
            return
        if self.compiled:
            _kernels().set(self.tree, self.offset, self.fanout, idx, values)
        else:
            _set_numpy(self.tree, self.offset, self.fanout, idx, values)

    def find(self, prefix: np.ndarray) -> np.ndarray:
        """For each x in [0, total), the leaf whose cumulative range [c_{i−1}, c_i) holds it
        (Eq. (1)). The tree must hold some priority."""
        x = np.ascontiguousarray(prefix, dtype=np.float64)
        if self.compiled:
            nodes = np.empty(len(x), dtype=np.int64)
            _kernels().find(self.tree, self.fanout, self.depth, x, nodes)
        else:
            nodes = _find_numpy(self.tree, self.fanout, self.depth, x)
        return nodes - self.offset

    def importance(self, leaves: np.ndarray, n: int, beta: float) -> np.ndarray:
        """Prioritized replay's importance weights of the leaves, w = (n·P(i))^-β with
        P(i) = p_i / total, over their max (float32; Schaul et al. 2016, Lemma 1). In one
        compiled call on the numba path (a fifth of a PEARL sample's numpy time otherwise)."""
        if self.compiled:
            out = np.empty(len(leaves), dtype=np.float32)
            _kernels().importance(self.tree, self.offset, np.ascontiguousarray(leaves, np.int64),
                                  n, beta, out)
            return out
        w = _pow(n * (self.get(leaves) / self.tree[0]), -beta)
        return (w / w.max()).astype(np.float32)

    def set_priorities(self, idx: np.ndarray, errors: np.ndarray, eps: float, alpha: float,
                       raw: np.ndarray) -> float:
        """Prioritized replay's priorities: p = |error| + ε (float64) written to `raw[idx]`
        (the sampler's own record of p), p^α to the leaves `idx` as `set` writes them; the
        largest p. In one compiled call on the numba path (its numpy steps took 20 µs of a
        PEARL iteration in the loop); 0 for no leaves."""
        idx = np.ascontiguousarray(idx, dtype=np.int64)
        if len(idx) == 0:
            return 0.0
        if self.compiled:
            return _kernels().priorities(self.tree, self.offset, self.fanout, idx,
                                         np.ascontiguousarray(errors), eps, alpha, raw)
        priority = np.abs(errors, dtype=np.float64)
        priority += eps
        raw[idx] = priority
        self.set(idx, _pow(priority, alpha))
        return float(priority.max())

    def stratified(self, draws: np.ndarray) -> np.ndarray:
        """n leaves, one per stratum: the total split into n equal segments, and leaf k found
        at x = (k + draws[k]) · total / n, draws in [0, 1) (PEARL's artifact, Schaul et al.)."""
        draws = np.ascontiguousarray(draws, dtype=np.float64)
        if self.compiled:
            nodes = np.empty(len(draws), dtype=np.int64)
            _kernels().stratified(self.tree, self.fanout, self.depth, draws, nodes)
            return nodes - self.offset
        return self.find((np.arange(len(draws)) + draws) * self.tree[0] / len(draws))

    def weighted_stratified(self, draws: np.ndarray, n: int,
                            beta: float) -> tuple[np.ndarray, np.ndarray]:
        """`stratified(draws)` and their `importance(…, n, beta)`: on the numba path in one
        call (PEARL's sample, every learner iteration: each call into numpy or numba costs
        2-4x its quiet time there, once the learner has run)."""
        if not self.compiled:
            leaves = self.stratified(draws)
            return leaves, self.importance(leaves, n, beta)
        leaves = np.empty(len(draws), dtype=np.int64)
        weights = np.empty(len(draws), dtype=np.float32)
        _kernels().weighted_stratified(self.tree, self.fanout, self.depth, self.offset,
                                       np.ascontiguousarray(draws, dtype=np.float64), n, beta,
                                       leaves, weights)
        return leaves, weights
