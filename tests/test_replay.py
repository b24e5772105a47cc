"""The uniform ring buffer stores what it is given, wraps, samples valid rows, round-trips;
MiniGo's window of generations keeps the last ones and samples a rank's share of a batch."""

from types import SimpleNamespace

import threading

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import compose_job, run_job

from hetrl.build import check_replay_memory
from hetrl.config.store import register
from hetrl.config.errors import ConfigError
from hetrl.options import made_option
from hetrl.precision.uniform import UniformPrecision
from hetrl.replay.loader import WindowLoader
from hetrl.replay.uniform import ROW_GATHER_BYTES, UniformReplay
from hetrl.replay.window import GenerationWindow
from hetrl.scheduler.state import LoopState
from hetrl.scheduler.updates import Updates

OBS = gym.spaces.Box(-10, 10, (3,))
ONE_STEP = {"n_step": 1, "gamma": 0.99}  # one-step transitions, 0.99 their bootstrap discount


def _filled(capacity: int, n: int, act_space=gym.spaces.Discrete(4),
            obs_space: gym.Space = OBS) -> UniformReplay:
    replay = UniformReplay(capacity, obs_space, act_space, torch.device("cpu"), **ONE_STEP)
    for i in range(n):  # obs carries its insertion number, so rows can be identified
        obs = np.full((1, *obs_space.shape), i, dtype=np.float32)
        replay.add(obs, np.array([i % 4]), np.array([float(i)]), obs + 0.5, np.array([i % 2]))
    return replay


@pytest.mark.parametrize("width", [3, 30])  # records sampled whole; column by column
def test_sampled_rows_are_stored_transitions(width):
    replay = _filled(100, 50, obs_space=gym.spaces.Box(-10, 10, (width,)))
    assert (replay.records.itemsize <= ROW_GATHER_BYTES) == (width == 3)
    batch = replay.sample(256)
    assert all(column.is_contiguous() for column in batch if isinstance(column, torch.Tensor))
    ids = batch.obs[:, 0]
    assert torch.all(ids < 50) and torch.equal(ids, batch.rewards)
    assert torch.equal(batch.next_obs, batch.obs + 0.5)
    assert torch.equal(batch.actions, ids.long() % 4) and torch.equal(batch.terminated, ids % 2)


def test_ring_overwrites_the_oldest_and_wraps_a_multi_env_add():
    replay = _filled(8, 6)
    obs = np.arange(6, 10, dtype=np.float32).repeat(3).reshape(4, 3)  # 4 envs at once
    replay.add(obs, np.zeros(4, dtype=np.int64), np.arange(6, 10), obs + 0.5, np.zeros(4))
    assert len(replay) == 8 and replay.pos == 2
    assert sorted(replay.obs[:, 0].tolist()) == [2, 3, 4, 5, 6, 7, 8, 9]


@pytest.mark.parametrize("kind, n_step", [("uniform", 1), ("uniform", 3), ("prioritized", 1)])
def test_add_steps_stores_a_chunk_as_successive_adds_and_names_the_slots(kind, n_step):
    """An actor's chunk (steps, envs, ...) in one call: the same ring, n-step windows and
    priorities as one `add` per step, wrapping the seam, and the slots it wrote, in order."""
    register()
    one, chunked = (made_option("replay", kind, capacity=10, obs_space=OBS,
                                act_space=gym.spaces.Discrete(4), device=torch.device("cpu"),
                                n_step=n_step) for _ in range(2))
    rng = np.random.default_rng(0)
    for _ in range(3):  # 3 chunks of 4 steps × 2 envs: 24 rows into 10 slots
        steps = (rng.normal(size=(4, 2, 3)).astype(np.float32), rng.integers(4, size=(4, 2)),
                 rng.normal(size=(4, 2)), rng.normal(size=(4, 2, 3)).astype(np.float32),
                 rng.random((4, 2)) < 0.2, rng.random((4, 2)) < 0.1)
        expected = np.concatenate([one.add(*(c[i] for c in steps)) for i in range(4)])
        pos = chunked.pos
        slots = chunked.add_steps(*steps)
        np.testing.assert_array_equal(slots, expected)
        assert slots.tolist() == [(pos + k) % 10 for k in range(len(slots))]
    for a, b in zip(one._columns(), chunked._columns()):
        np.testing.assert_array_equal(a, b)
    assert (one.pos, one.size) == (chunked.pos, chunked.size)
    if kind == "prioritized":
        np.testing.assert_array_equal(one.tree.tree, chunked.tree.tree)


def test_continuous_actions_keep_their_shape_and_values():
    box = gym.spaces.Box(-2, 2, (2,))
    replay = UniformReplay(10, OBS, box, torch.device("cpu"), **ONE_STEP)
    replay.add(np.zeros((1, 3)), np.array([[0.25, -1.5]]), np.ones(1), np.zeros((1, 3)), np.zeros(1))
    assert replay.sample(3).actions.tolist() == [[0.25, -1.5]] * 3


def test_state_round_trip_restores_contents_and_position():
    replay = _filled(16, 20)
    copy = UniformReplay(16, OBS, gym.spaces.Discrete(4), torch.device("cpu"), **ONE_STEP)
    copy.load_state_dict(replay.state_dict())
    assert (copy.pos, len(copy)) == (replay.pos, len(replay))
    np.random.seed(3)
    a = replay.sample(32)
    np.random.seed(3)
    b = copy.sample(32)
    assert all(torch.equal(x, y) for x, y in zip(a[:5], b[:5]))  # the columns (no weights)


def _stored_bytes(replay) -> int:
    """The bytes of the arrays the replay holds (its columns are views of its records)."""
    return sum(array.nbytes for array in vars(replay).values()
               if isinstance(array, np.ndarray) and array.base is None)


def test_nbytes_is_what_the_arrays_take():
    frames = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    for obs, act in ((OBS, gym.spaces.Discrete(4)), (OBS, gym.spaces.Box(-1, 1, (2,))),
                     (frames, gym.spaces.Discrete(4))):
        replay = UniformReplay(100, obs, act, torch.device("cpu"), **ONE_STEP)
        assert UniformReplay.nbytes(100, obs, act, steps=10) == _stored_bytes(replay)


def test_a_replay_larger_than_memory_is_named_before_it_is_allocated(tmp_path):
    cfg, _ = compose_job("algo.buffer_size=1000000")
    with pytest.raises(ConfigError) as err:  # 1M CartPole transitions: 52 MB
        check_replay_memory(cfg, gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2),
                            available=10_000_000)
    message = str(err.value)
    assert "algo.buffer_size=1000000 is invalid" in message
    assert "needs 52,000,000 bytes" in message and "10,000,000 bytes" in message
    cfg, _ = compose_job("replay.capacity=1000000")
    with pytest.raises(ConfigError, match="replay.capacity=1000000 is invalid"):
        check_replay_memory(cfg, gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2),
                            available=10_000_000)
    with pytest.raises(ConfigError, match=r"algo.buffer_size=10000000000 is invalid.*GiB"):
        run_job(tmp_path, "algo.buffer_size=10000000000", "tracking=none")  # 520 GB


def _generation(gen: int, n: int) -> tuple:
    """`n` go5 positions of generation `gen`, each row's result naming both."""
    return (gen, np.zeros((n, 12, 5, 5), np.uint8), np.full((n, 26), 1 / 26, np.float32),
            np.full(n, 100 * gen + np.arange(n), np.float32))


def test_the_window_keeps_the_last_generations_in_the_checkpointed_list():
    checkpointed = [_generation(0, 3)]
    window = GenerationWindow(2, np.random.default_rng(0), checkpointed)
    assert len(window) == 3
    window.add(_generation(1, 4))
    window.add(_generation(2, 5))
    assert [g[0] for g in checkpointed] == [1, 2] and window.generations is checkpointed
    assert len(window) == 9
    batch = window.sample(6)
    assert batch.weights is None  # never prioritized: the update step hands back nothing
    assert set(batch.zs.tolist()) <= {100 + k for k in range(4)} | {200 + k for k in range(5)}
    assert batch.planes.shape == (6, 12, 5, 5) and batch.pis.shape == (6, 26)
    assert len(window.sample(1000).zs) == 9  # no more rows than positions


def test_the_update_step_samples_a_ranks_share_of_the_batch():
    seen = []
    learner = SimpleNamespace(device=torch.device("cpu"), batch_size=8,
                              learn=lambda batch: seen.append(len(batch.zs)) or {})
    window = GenerationWindow(1, np.random.default_rng(0), [_generation(0, 20)])
    for ranks in (1, 2, 3):
        Updates(learner, window, UniformPrecision("float32", None), LoopState(), ranks).step()
    assert seen == [8, 4, 2]


class _ReadsRecorded(GenerationWindow):
    """A window that counts its draws and records the thread each read runs on."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.draws, self.readers = 0, []

    def draw(self, n: int) -> np.ndarray:
        self.draws += 1
        return super().draw(n)

    def read(self, rows: np.ndarray):
        self.readers.append(threading.current_thread().name)
        return super().read(rows)


def _rows(n: int) -> tuple:
    """`n` go5 positions, each row's planes, policy and result distinct."""
    planes = np.arange(n * 12 * 25, dtype=np.int64).reshape(n, 12, 5, 5).astype(np.uint8)
    pis = np.random.default_rng(1).dirichlet(np.ones(26), size=n).astype(np.float32)
    return (0, planes, pis, np.arange(n, dtype=np.float32))


def test_the_window_loader_yields_the_direct_reads_one_ahead():
    """Inside a pass each batch is the one a direct read of the same seeded window gives,
    the next one read already on the loader's thread; the window's generator draws no more
    than the direct reads, so what follows training draws the same."""
    loaded = _ReadsRecorded(1, np.random.default_rng(7), [_rows(40)])
    direct = GenerationWindow(1, np.random.default_rng(7), [_rows(40)])
    loader = WindowLoader(loaded)
    with loader.reading(4):
        for k in range(4):
            batch, expected = loader.sample(16), direct.sample(16)
            for got, want in zip(batch, expected):
                assert got.equal(want)
            assert loaded.draws == min(k + 2, 4)  # the next batch is on its way
    assert loaded.readers == ["window-loader_0"] * 4
    assert loaded.rng.integers(1 << 30) == direct.rng.integers(1 << 30)
    assert loader.sample(8).zs.equal(direct.sample(8).zs)  # outside a pass: a direct read


def test_the_update_step_trains_on_the_loaders_batches():
    """The selfplay loop's train phase: `Updates` samples the loader inside a pass."""
    seen = []
    learner = SimpleNamespace(device=torch.device("cpu"), batch_size=8,
                              learn=lambda batch: seen.append(batch.zs) or {})
    loader = WindowLoader(GenerationWindow(1, np.random.default_rng(3), [_rows(30)]))
    direct = GenerationWindow(1, np.random.default_rng(3), [_rows(30)])
    updates = Updates(learner, loader, UniformPrecision("float32", None), LoopState())
    with loader.reading(3):
        for _ in range(3):
            updates.step()
    assert [zs.tolist() for zs in seen] == [direct.sample(8).zs.tolist() for _ in range(3)]
