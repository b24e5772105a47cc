"""The F-ary sum tree (spec T10): its shape, sums after many updates, sampling by prefix
sum (Eq. (1)) and its frequencies, stratified draws, and the compiled path agreeing with
the numpy reference bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import chisquare

from hetrl.replay.sumtree import COMPILED, SumTree

FANOUTS = (2, 4, 16)
PATHS = [pytest.param(False, id="numpy"),
         pytest.param(True, id="numba",
                      marks=pytest.mark.skipif(not COMPILED, reason="numba not installed"))]


def _leaves(tree: SumTree) -> np.ndarray:
    return tree.tree[tree.offset:]


def _updated(tree: SumTree, rng: np.random.Generator, updates: int = 10_000,
             batch: int = 100) -> SumTree:
    """`updates` random leaf writes in batches (repeats included), a fifth of them zeros."""
    for _ in range(updates // batch):
        idx = rng.integers(0, tree.capacity, batch)
        tree.set(idx, rng.random(batch) * 10.0 ** rng.uniform(-3, 3) * (rng.random(batch) > 0.2))
    return tree


@pytest.mark.parametrize("compiled", PATHS)
@pytest.mark.parametrize("fanout", FANOUTS)
def test_depth_padding_and_sums_after_ten_thousand_updates(fanout, compiled):
    tree = _updated(SumTree(8192, fanout, compiled=compiled), np.random.default_rng(fanout))
    assert tree.depth == math.ceil(math.log(8192, fanout) - 1e-12)  # 13, 7, 4
    assert tree.leaves == fanout**tree.depth and len(_leaves(tree)) == tree.leaves
    assert not _leaves(tree)[8192:].any()  # padded leaves hold 0
    assert tree.total == pytest.approx(_leaves(tree).sum(), rel=1e-9)
    inner = np.arange(tree.offset)  # every inner node: its F children summed left to right
    children = tree.tree[inner[:, None] * fanout + np.arange(1, fanout + 1)]
    assert np.array_equal(tree.tree[inner], sum(children[:, j] for j in range(fanout)))


@pytest.mark.parametrize("compiled", PATHS)
@pytest.mark.parametrize("fanout", FANOUTS)
def test_sampling_is_searchsorted_on_the_cumulative_sums(fanout, compiled):
    rng = np.random.default_rng(10 + fanout)
    tree = _updated(SumTree(8192, fanout, compiled=compiled), rng)
    x = rng.random(10_000) * tree.total  # 0-based, x ~ U[0, total)
    cumsum = np.cumsum(_leaves(tree)[:8192])
    assert np.array_equal(tree.find(x), np.searchsorted(cumsum, x, side="left"))
    assert tree.get(tree.find(x)).min() > 0
    assert np.array_equal(tree.get(np.arange(8192)), _leaves(tree)[:8192])  # retrieval


@pytest.mark.parametrize("compiled", PATHS)
def test_a_leaf_owns_the_half_open_range_and_zero_priorities_are_never_drawn(compiled):
    tree = SumTree(7, 4, compiled=compiled)
    tree.set(np.arange(7), np.array([0.0, 1.0, 2.0, 0.0, 0.0, 4.0, 0.0]))
    # cumulative sums 0, 1, 3, 3, 3, 7, 7: x on a boundary goes to the leaf that starts there
    x = np.array([0.0, 0.5, 1.0, 2.99, 3.0, 6.99, 7.0, 7.5, np.inf])
    assert tree.find(x).tolist() == [1, 1, 2, 2, 5, 5, 5, 5, 5]  # past the total: the last


@pytest.mark.parametrize("compiled", PATHS)
@pytest.mark.parametrize("fanout", FANOUTS)
def test_sampled_frequencies_follow_the_priorities(fanout, compiled):
    """χ² of the leaves' counts against P(i) = p_i / Σp, for independent and stratified
    draws (stratification only lowers the variance)."""
    rng = np.random.default_rng(20 + fanout)
    tree = SumTree(50, fanout, compiled=compiled)
    priorities = rng.uniform(0.1, 10, 50)
    tree.set(np.arange(50), priorities)
    expected = priorities / priorities.sum()
    n = 100_000
    independent = tree.find(rng.random(n) * tree.total)
    stratified = np.concatenate([tree.stratified(rng.random(1000)) for _ in range(n // 1000)])
    for drawn in (independent, stratified):
        counts = np.bincount(drawn, minlength=50)
        assert chisquare(counts, expected * n).pvalue > 0.001


@pytest.mark.parametrize("compiled", PATHS)
def test_a_stratified_batch_has_one_draw_per_stratum(compiled):
    tree = SumTree(1024, 16, compiled=compiled)
    tree.set(np.arange(1024), np.ones(1024))
    for _ in range(20):  # equal priorities: draw k lies in slots [8k, 8k + 8)
        assert np.array_equal(tree.stratified(np.random.random(128)) // 8, np.arange(128))
    rng = np.random.default_rng(1)
    tree.set(np.arange(1024), rng.random(1024) ** 4)
    cumsum = np.cumsum(tree.get(np.arange(1024)))
    drawn = tree.stratified(rng.random(128))
    start, end = cumsum[drawn] - tree.get(drawn), cumsum[drawn]
    strata = np.arange(128) * tree.total / 128
    assert np.all((start < strata + tree.total / 128 + 1e-9) & (end > strata - 1e-9))


@pytest.mark.skipif(not COMPILED, reason="numba not installed")
@pytest.mark.parametrize("fanout", (2, 3, 4, 8, 16, 32))
def test_compiled_and_numpy_paths_agree_bit_for_bit(fanout):
    rng = np.random.default_rng(30 + fanout)
    compiled, reference = (SumTree(5000, fanout, compiled=c) for c in (True, False))
    for _ in range(50):
        idx = rng.integers(0, 5000, 64)
        values = rng.random(64) * (rng.random(64) > 0.3)
        compiled.set(idx, values)
        reference.set(idx, values)
        assert np.array_equal(compiled.tree, reference.tree)
    cumsum = np.cumsum(reference.get(np.arange(5000)))
    x = np.concatenate([rng.random(10_000) * reference.total, cumsum[::7],  # boundaries too
                        [0.0, reference.total, np.nextafter(reference.total, 0), np.inf]])
    assert np.array_equal(compiled.find(x), reference.find(x))
    draws = rng.random(256)
    assert np.array_equal(compiled.stratified(draws), reference.stratified(draws))
    leaves = reference.stratified(draws)
    for beta in (0.4, 1.0):
        assert np.array_equal(compiled.importance(leaves, 4000, beta),
                              reference.importance(leaves, 4000, beta))
        for tree in (compiled, reference):
            drawn, weights = tree.weighted_stratified(draws, 4000, beta)
            assert np.array_equal(drawn, leaves)
            assert np.array_equal(weights, reference.importance(leaves, 4000, beta))
    raws = np.zeros(5000), np.zeros(5000)
    for alpha in (0.5, 0.6, 1.0):
        td = (rng.standard_normal(64) * 3).astype(np.float32)
        slots = rng.integers(0, 5000, 64)
        tops = [tree.set_priorities(slots, td, 1e-6, alpha, raw)
                for tree, raw in zip((compiled, reference), raws)]
        assert tops[0] == tops[1] and np.array_equal(*raws)
        assert np.array_equal(compiled.tree, reference.tree)


@pytest.mark.parametrize("compiled", PATHS)
def test_importance_weights_are_n_p_to_the_minus_beta_over_their_max(compiled):
    """PER's weights (N·P(i))^-β / max: the least likely leaf of the batch weighs 1, and a
    leaf k times as likely weighs k^-β of it."""
    tree = SumTree(100, 4, compiled=compiled)
    tree.set(np.arange(4), np.array([1.0, 2.0, 4.0, 1.0]))
    w = tree.importance(np.array([0, 1, 2, 3, 2]), 4, 0.5)
    assert w.dtype == np.float32
    np.testing.assert_allclose(w, [1.0, 2 ** -0.5, 0.5, 1.0, 0.5], rtol=1e-7)


@pytest.mark.parametrize("compiled", PATHS)
def test_priorities_are_the_error_plus_eps_and_the_leaves_p_to_the_alpha(compiled):
    """PER's priority update: p = |δ| + ε kept in the sampler's record, p^α in the leaves
    (a repeated slot: the last error wins, as in `set`), the largest p returned."""
    tree, raw = SumTree(8, 2, compiled=compiled), np.zeros(8)
    top = tree.set_priorities(np.array([1, 5, 1]), np.array([-3.0, 0.5, 2.0], np.float32),
                             1.0, 0.5, raw)
    assert top == 4.0
    np.testing.assert_array_equal(raw, [0, 3.0, 0, 0, 0, 1.5, 0, 0])
    np.testing.assert_allclose(tree.get(np.arange(8)), [0, 3 ** 0.5, 0, 0, 0, 1.5 ** 0.5, 0, 0])
    assert tree.total == pytest.approx(3 ** 0.5 + 1.5 ** 0.5)


def test_a_tree_of_one_slot_and_an_empty_batch():
    for compiled in (False, COMPILED):
        tree = SumTree(1, 16, compiled=compiled)
        assert tree.depth == 0 and tree.leaves == 1
        tree.set(np.array([0]), np.array([2.5]))
        tree.set(np.array([], np.int64), np.array([]))
        assert tree.set_priorities(np.array([], np.int64), np.array([], np.float32), 0.1, 0.6,
                                   np.zeros(1)) == 0.0
        assert tree.total == 2.5 and tree.find(np.array([1.0])).tolist() == [0]
    with pytest.raises(ValueError):
        SumTree(8, 1)
