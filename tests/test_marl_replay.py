"""Multi-agent replay: every sampler gives valid slots and every layout (numpy rings per agent,
joint rows, openai/maddpg's lists of tuples) gives back what it stored (the same batch for the
same slots); locality windows are contiguous and wrap at the
ring's seam; importance weights follow Lemma 1; the sum tree samples proportionally."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from hydra.utils import instantiate

from hetrl.config.store import register
from hetrl.options import composed_option, group_options
from hetrl.replay import multiagent
from hetrl.replay.multiagent import JointReplay, PerAgentListsReplay, PerAgentReplay
from hetrl.replay.samplers import (LocalitySampler, PrioritizedLocalitySampler,
                                   PrioritizedSampler, windows)
from hetrl.replay.sumtree import SumTree

N_AGENTS, WIDTH, DIMS = 3, 5, (5, 5, 3)  # the last agent's observation is padded (as prey)
REAL = np.arange(WIDTH)[None, :] < np.array(DIMS)[:, None]
OBS = gym.spaces.Box(np.where(REAL, -np.inf, 0).astype(np.float32),
                     np.where(REAL, np.inf, 0).astype(np.float32), (N_AGENTS, WIDTH))
ACTS = gym.spaces.MultiDiscrete([5] * N_AGENTS)
OPTIONS = dict(refs=4, neighbors=8, thresholds=[0.33, 0.66], neighbor_counts=[1, 2, 4],
               alpha=0.6, beta=0.4, beta_final=1.0, beta_anneal=100, eps=1e-6)

LAYOUTS = (PerAgentReplay, JointReplay, PerAgentListsReplay)

register()


def _transition(t: int, n_envs: int = 1) -> tuple[np.ndarray, ...]:
    """Transitions numbered t, t+1, ...: every field of agent i says (number, i)."""
    ids = t + np.arange(n_envs)
    obs = ids[:, None, None] * 10.0 + np.arange(N_AGENTS)[None, :, None] + np.zeros(WIDTH)
    obs = np.where(REAL, obs, 0).astype(np.float32)
    actions = (ids[:, None] + np.arange(N_AGENTS)) % 5
    rewards = (ids[:, None] * 10.0 + np.arange(N_AGENTS)).astype(np.float32)
    return obs, actions, rewards, obs + 0.5 * REAL, (ids % 2).astype(np.float32)


def _sampler(name: str, capacity: int = 64):
    """The option replay/sampler=<name> as Hydra builds it, with OPTIONS' values for its keys."""
    node = composed_option("replay/sampler", name)
    return instantiate(node, **{k: v for k, v in {**OPTIONS, "capacity": capacity}.items()
                                if k in node})


def _filled(layout: type, sampler: str, capacity: int = 64, n: int = 100):
    replay = layout(capacity, OBS, ACTS, torch.device("cpu"), _sampler(sampler, capacity))
    for t in range(0, n, 2):  # two envs a step, wrapping the ring
        replay.add(*_transition(t, n_envs=2))
    return replay


@pytest.mark.parametrize("sampler", group_options("replay/sampler"))
def test_every_sampler_with_every_layout_returns_what_was_stored(sampler):
    batches = []
    for layout in LAYOUTS:
        replay = _filled(layout, sampler)
        np.random.seed(0)
        batch = replay.sample(32)
        if batch.weights is not None:  # prioritized: new priorities change the next batch
            replay.update_priorities(batch.indices, torch.linspace(0, 3, 32))
            batch = replay.sample(32)
        batches.append(batch)
        ids = batch.rewards[:, 0] / 10  # the transition number each row holds
        assert batch.obs.shape == (32, N_AGENTS, WIDTH) and batch.actions.shape == (32, N_AGENTS)
        assert torch.all((ids >= 36) & (ids < 100))  # only the 64 newest are stored
        for column, name in ((0, "obs"), (1, "actions"), (2, "rewards"), (3, "next_obs")):
            rows = torch.stack([torch.as_tensor(_transition(int(t))[column][0]) for t in ids])
            assert torch.equal(getattr(batch, name), rows.to(getattr(batch, name).dtype)), name
        assert torch.equal(batch.terminated, (ids % 2)[:, None].expand(-1, N_AGENTS))
    per_agent, *others = batches  # the same slots: the same batch from every layout
    for other in others:
        for name in ("obs", "actions", "rewards", "next_obs", "terminated", "weights"):
            a, b = getattr(per_agent, name), getattr(other, name)
            assert (a is None and b is None) or torch.equal(a, b), name
            assert a is None or a.dtype == b.dtype, name


def test_a_layout_round_trips_through_its_state():
    for layout in LAYOUTS:
        replay = _filled(layout, "prioritized")
        copy = layout(64, OBS, ACTS, torch.device("cpu"), _sampler("prioritized"))
        copy.load_state_dict(replay.state_dict())
        np.random.seed(1)
        a = replay.sample(16)
        np.random.seed(1)
        b = copy.sample(16)
        assert all(torch.equal(x, y) for x, y in zip(a[:5], b[:5]))
        assert torch.equal(a.weights, b.weights)


def test_locality_windows_are_contiguous_and_wrap_at_the_seam():
    assert windows(np.array([8, 2]), 4, 10).tolist() == [8, 9, 0, 1, 2, 3, 4, 5]
    np.random.seed(0)
    sampler = LocalitySampler(refs=64, neighbors=16)
    idx, weights = sampler.sample(1024, size=100)
    assert weights is None and idx.min() >= 0 and idx.max() < 100
    steps = np.diff(idx.reshape(64, 16), axis=1) % 100
    assert np.all(steps == 1)  # each window is contiguous modulo the ring
    assert np.any(np.diff(idx.reshape(64, 16), axis=1) == -99)  # and some wrap 99 -> 0
    with pytest.raises(ValueError):
        sampler.sample(512, size=100)


def test_importance_weights_follow_lemma_1_on_a_hand_computed_case():
    """Two stored slots with priorities 1 and 0.25 (α = β = 1): P = 0.8 and 0.2, so
    w = (1/(N·P))^β = 0.625 and 2.5, 0.25 and 1 over their max. Slot 0's normalized priority
    1 > 0.66 gives a window of 4 (wrapping over the 2 slots), slot 1's 0.25 < 0.33 one of 1."""
    sampler = PrioritizedLocalitySampler([0.33, 0.66], [1, 2, 4], capacity=8, alpha=1.0,
                                         beta=1.0, beta_final=1.0, beta_anneal=1, eps=1e-12)
    sampler.added(np.array([0, 1]))
    sampler.update(np.array([0, 1]), np.array([1.0, 0.25]))
    assert sampler.window_lengths(np.array([0, 1])).tolist() == [4, 1]
    np.random.seed(0)
    idx, weights = sampler.sample(256, size=2)
    assert set(np.round(weights, 6)) == {0.25, 1.0}
    assert np.all(idx[weights == 1.0] == 1)  # weight 1: a window of slot 1 alone
    assert np.all(weights[idx == 0] == 0.25)  # slot 0 only ever comes in slot 0's windows
    # slot 0 is the reference of 80% of the windows: 4 of its slots per 1 of slot 1's
    assert np.mean(weights == 0.25) == pytest.approx(4 * 0.8 / (4 * 0.8 + 0.2), abs=0.05)

    per = PrioritizedSampler(8, alpha=1.0, beta=0.5, beta_final=0.5, beta_anneal=1, eps=1e-12)
    per.added(np.arange(4))
    per.update(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    idx, weights = per.sample(512, size=4)
    expected = (1 / (4 * np.array([1, 2, 3, 4]) / 10)) ** 0.5
    assert weights == pytest.approx(expected[idx] / expected[idx].max(), rel=1e-5)
    assert np.bincount(idx, minlength=4) / 512 == pytest.approx([0.1, 0.2, 0.3, 0.4], abs=0.06)


def test_sum_tree_totals_and_finds_by_prefix_sum():
    tree = SumTree(5)
    tree.set(np.array([0, 1, 2, 3, 4, 2]), np.array([1.0, 2.0, 9.0, 3.0, 4.0, 0.0]))
    assert tree.total == 10.0
    assert tree.find(np.array([0.0, 0.99, 1.0, 2.99, 3.0, 5.99, 6.0, 9.99])).tolist() == [
        0, 0, 1, 1, 3, 3, 4, 4]


def test_storage_grows_to_capacity_keeping_what_is_stored(monkeypatch):
    monkeypatch.setattr(multiagent, "INITIAL_ROWS", 8)
    for layout in LAYOUTS:
        replay = _filled(layout, "uniform", capacity=40, n=50)  # grows 8 -> 16 -> 32 -> 40
        assert replay.allocated == 40 and len(replay) == 40 and replay.pos == 10
        obs, _, rewards, _, _ = replay.gather(np.arange(40))
        stored = sorted(rewards[:, 0] / 10)
        assert stored == list(range(10, 50)) and np.all(obs[:, 0, 0] == rewards[:, 0])
        slots = replay.add(*_transition(50, n_envs=2))  # the slots it wrote: where they are
        assert slots.tolist() == [10, 11]
        assert (replay.gather(slots)[2][:, 0] / 10).tolist() == [50, 51]


def test_nbytes_bounds_what_the_storage_takes(monkeypatch):
    monkeypatch.setattr(multiagent, "INITIAL_ROWS", 8)
    for layout in (PerAgentReplay, JointReplay):
        replay = _filled(layout, "uniform", capacity=40, n=50)  # grown to capacity
        stored = sum(array.nbytes for array in replay.arrays())
        assert stored == 40 * layout.row_bytes(OBS)
        assert layout.nbytes(40, OBS, ACTS, steps=50) == int(1.5 * stored)  # while growing
        assert layout.nbytes(10**9, OBS, ACTS, steps=10) == int(1.5 * 20 * layout.row_bytes(OBS))


def test_the_list_layout_stores_python_tuples_per_agent_as_openai_maddpg():
    replay = _filled(PerAgentListsReplay, "uniform", capacity=64, n=100)
    assert [len(storage) for storage in replay.storage] == [64] * N_AGENTS
    obs, action, reward, next_obs, done = replay.storage[2][0]  # the ring wrapped: slot 0
    assert obs.shape == (DIMS[2],) and isinstance(action, int) and isinstance(reward, float)
    assert reward == 64 * 10.0 + 2 and done == 0.0  # transition 64 overwrote transition 0
