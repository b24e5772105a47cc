"""PEARL's runtime pieces: T14 (Algorithm 1 on synthetic timings) and T15 (a deterministic
collision schedule; the version-tagged double buffer), and DQN-CartPole learning under
scheduler=pearl."""

from __future__ import annotations

import threading

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import NOT_MEASURED, build_job, tracking_uri
from mlflow.tracking import MlflowClient

from hetrl.actors.shared import DoubleBuffer
from hetrl.algos.base import Batch
from hetrl.replay.uniform import UniformReplay
from hetrl.scheduler.pearl_runtime import CollisionCheck, ResourceManager, Timings
from hetrl.scheduler.state import LoopState
from hetrl.scheduler.updates import Updates

# ---- T14: Algorithm 1 ---------------------------------------------------------------------


def test_t14_learner_bound_halves_actors_once_and_steps_b():
    m = ResourceManager(actors=8, batch_size=512)
    learner_bound = Timings(actor_s=1e-3, learner_s=50e-3)  # 98 µs/exp vs 1 ms / 64 exp
    first = m.step(learner_bound, experiences=64)
    assert first.action == "shrink_actors" and (m.actors, m.cpu_trainers) == (4, 4)
    assert m.b == 64  # BS / 8
    second = m.step(learner_bound, experiences=64)
    assert second.action == "grow_b" and m.actors == 4 and m.b == 128  # halved only once


def test_t14_cpu_training_and_host_sync_bound():
    m = ResourceManager(actors=4, batch_size=256, cpu_trainers=2, b=64, halved=True)
    assert m.step(Timings(1e-3, 1e-3, train_cpu_s=50e-3), 64).action == "shrink_b"
    assert m.b == 32
    d = m.step(Timings(1e-3, 1e-3, sync_host_s=50e-3), 64)
    assert d.action == "give_core_back" and (m.actors, m.cpu_trainers, m.b) == (5, 1, 32)
    d = m.step(Timings(1e-3, 1e-3, sync_host_s=50e-3), 64)  # the last trainer takes b along
    assert d.action == "give_core_back" and (m.actors, m.cpu_trainers, m.b) == (6, 0, 0)


def test_t14_an_update_that_cannot_be_split_keeps_b_zero():
    m = ResourceManager(actors=4, batch_size=256, sub_batch=False)
    learner_bound = Timings(actor_s=1e-3, learner_s=50e-3)
    assert m.step(learner_bound, 64).action == "shrink_actors" and m.b == 0
    assert m.step(learner_bound, 64).action == "none" and m.b == 0


def test_t14_no_trigger_unless_learner_dominates_by_2x():
    m = ResourceManager(actors=4, batch_size=32)
    # learner 31 µs/exp vs actors 20 µs/exp: dominates, but by less than 2x
    assert m.step(Timings(actor_s=1.28e-3, learner_s=1e-3), experiences=64).action == "none"
    assert (m.actors, m.cpu_trainers, m.b) == (4, 0, 0)


def modeled_eps(actors: int, learner_threads: int, batch: int) -> float:
    """A toy host: the learner's step scales with its threads, the actors share the rest."""
    learner_s = 40e-3 / learner_threads
    actor_s = batch * 50e-6 / actors
    return batch / max(learner_s, actor_s)


def test_t14_modeled_eps_rises_with_the_mechanism():
    m = ResourceManager(actors=8, batch_size=512)
    off = modeled_eps(8, 1, 512)
    m.step(Timings(actor_s=512 * 50e-6 / 8, learner_s=40e-3), experiences=512)
    on = modeled_eps(m.actors, 1 + m.cpu_trainers, 512)
    assert on > 1.15 * off


# ---- T15: collision-free scheduling and the double buffer ------------------------------


class RecordingReplay(UniformReplay):
    """A uniform replay that samples fixed slots and records the priority updates it gets,
    as a prioritized replay would (batches with indices and weights)."""

    def __init__(self, slots: np.ndarray) -> None:
        super().__init__(4, gym.spaces.Box(-1, 1, (1,)), gym.spaces.Discrete(2),
                         torch.device("cpu"), n_step=1, gamma=0.99)
        self.slots, self.priorities = slots, {}

    def sample(self, n: int) -> Batch:
        idx = self.slots
        cols = [torch.from_numpy(c[idx]) for c in self._columns()]
        return Batch(cols[0], cols[1], cols[2], cols[3], cols[4], indices=idx,
                     weights=torch.ones(len(idx)), discounts=cols[5])

    def update_priorities(self, indices, td_errors) -> None:
        self.priorities.update(zip(indices.tolist(), td_errors.tolist()))


class RecordingLearner:
    batch_size, train_freq, gradient_steps, learning_starts = 2, 1, 1, 0
    device = torch.device("cpu")

    def learn(self, batch: Batch) -> dict[str, torch.Tensor]:
        self.seen = batch.obs.clone()
        return {"td_errors": batch.obs[:, 0] * 10}


def test_t15_a_slot_overwritten_after_sampling_keeps_no_stale_priority():
    replay = RecordingReplay(np.array([1, 2]))
    for k in range(4):  # slots 0..3 hold obs 0..3; the ring is full, next write at slot 0
        replay.add(np.array([[float(k)]]), np.array([0]), np.zeros(1), np.zeros((1, 1)),
                   np.zeros(1), np.zeros(1))
    check, learner = CollisionCheck(replay.capacity), RecordingLearner()
    updates = Updates(learner, replay, _NoPrecision(), LoopState())

    def after_sample(batch):  # the batched insertion after sampling: slots 0 and 1 anew
        check.sampled(batch.indices)
        for value in (100.0, 101.0):
            check.written(replay.add(np.array([[value]]), np.array([0]), np.zeros(1),
                                     np.zeros((1, 1)), np.zeros(1), np.zeros(1)))
        return check.keep

    updates.step(after_sample)
    assert learner.seen[:, 0].tolist() == [1.0, 2.0]  # trained on the data it sampled
    assert replay.obs[1, 0] == 101.0  # the slot holds the new experience ...
    assert 1 not in replay.priorities  # ... whose priority is not the old TD error
    assert replay.priorities == {2: 20.0}  # the untouched slot's update went in
    assert check.collisions == 1
    replay.slots = np.array([0, 1])  # the insertion now writes slots 2 and 3: no collision
    updates.step(after_sample)
    assert replay.priorities == {2: 20.0, 0: 1000.0, 1: 1010.0} and check.collisions == 1
    check.sampled(np.array([2, 3]))  # slots 2 and 3, written last time, sampled again
    check.written(np.empty(0, dtype=np.int64))  # an insertion that wrote nothing
    assert check.keep(np.array([2, 3])) is None  # every update goes in


class _NoPrecision:
    def autocast(self, device):
        import contextlib

        return contextlib.nullcontext()


def test_t15_double_buffer_readers_never_see_a_torn_version():
    buf = DoubleBuffer(8)
    assert buf.read() is None
    buf.write(0, torch.zeros(8))
    seen = []

    def mid_write(slot):  # a reader arrives while version 1 is half written
        seen.append(buf.read())

    buf.write(1, torch.ones(8), during=mid_write)
    version, weights = seen[0]
    assert version == 0 and torch.equal(weights, torch.zeros(8))  # the whole old version
    version, weights = buf.read()
    assert version == 1 and torch.equal(weights, torch.ones(8))


def test_t15_double_buffer_under_a_concurrent_writer():
    buf = DoubleBuffer(4096)
    stop = threading.Event()

    def writer():
        v = 0
        while not stop.is_set():
            buf.write(v, torch.full((4096,), float(v)))
            v += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(2000):
            got = buf.read()
            if got is not None:
                version, weights = got
                assert torch.all(weights == float(version))  # one version, whole
    finally:
        stop.set()
        thread.join()


# ---- DQN-CartPole learns under scheduler=pearl -------------------------------------------


@pytest.mark.slow
def test_dqn_cartpole_learns_under_pearl(tmp_path):
    """The tuned DQN (conf/tuned/dqn_cartpole.yaml) under PEARL's protocol, with its default
    replay=prioritized (PER's learning test: fanout 16, α 0.6, β 0.4 → 1, ε 0.01) and [64, 64]
    networks (31 s with the tuned [256, 256] ones, 12 s with these): actors and learner run
    concurrently, so the curve depends on the host's timing; it starts unsolved and climbs
    past 120, where the job ends (seeds 0 and 1 on a loaded 2-core host: at 15k steps, 14 s;
    with the tuned networks they reach 245-285 at 50k)."""
    from helpers import metric_history, run_job

    result = run_job(tmp_path, "algo=dqn", "scheduler=pearl", "steps=40000", "seed=0",
                     "algo.hidden=[64,64]", "log_every=2500", "stop_return=120", *NOT_MEASURED)
    curve = [value for _, value in metric_history(tmp_path, result["run_id"],
                                                   "return_mean_100")]
    assert curve[0] < 100
    assert result["return_mean_100"] >= 120, curve


# ---- the protocol end to end: the sync loop's updates; weights through the double buffer ---


def _short_run(tmp_path, scheduler, *extra):
    from hetrl import experiment
    from hetrl.config.store import register
    from hetrl.options import compose_job

    register()
    cfg, choices = compose_job("algo=dqn", f"scheduler={scheduler}", "tracking=none",
                               "steps=2000", "seed=0", "algo.hidden=[16]", *extra)
    (tmp_path / scheduler).mkdir()
    return experiment.run(cfg, choices, tmp_path / scheduler)


def test_pearl_pays_every_update_the_sync_loop_makes(tmp_path):
    """The learner once fell behind the actors and the owed updates were dropped at the end
    (251 of 2,048 in a 5k-step run): pearl must train as much as sync on the same data."""
    pearl = _short_run(tmp_path, "pearl")
    sync = _short_run(tmp_path, "sync")
    assert pearl["updates"] == sync["updates"] > 0


def test_algorithm_1_runs_each_of_its_actions_inside_a_running_loop(tmp_path, monkeypatch):
    """The loop's profiled times forced (its one Timings source, `PearlHost.profiled`):
    learner-bound twice, then CPU-trainer-bound, then host-sync-bound, then balanced. The
    running job's manager halves the 2 actors into a CPU trainer, grows b, shrinks it and
    gives the core back, as its logged decisions say; the CPU trainer really trained b rows
    meanwhile, and the revived actor acts again."""
    from helpers import metric_history, run_job

    from hetrl.scheduler.pearl import PearlHost

    forced = [Timings(1e-9, 1.0), Timings(1e-9, 1.0), Timings(1e-9, 1e-6, train_cpu_s=1.0),
              Timings(1e-9, 1e-6, sync_host_s=1.0)]
    monkeypatch.setattr(PearlHost, "profiled",
                        lambda host: forced.pop(0) if forced else Timings(1.0, 0.0))
    result = run_job(tmp_path, "algo=dqn", "scheduler=pearl", "steps=500", "algo.hidden=[16]",
                     "algo.learning_starts=100", "scheduler.resource_every=10", "log_every=500",
                     *NOT_MEASURED)
    decisions = [v for _, v in metric_history(tmp_path, result["run_id"], "pearl/decision")]
    assert decisions == [1, 2, 3, 4]  # shrink_actors, grow_b, shrink_b, give_core_back
    assert result["pearl/t_train_cpu_s"] > 0  # the CPU trainer's part of each batch
    assert result["pearl/actors"] == 2.0 and result["pearl/b"] == 0.0
    table = MlflowClient(tracking_uri(tmp_path)).download_artifacts(
        result["run_id"], "pearl/resource_decisions.csv", str(tmp_path))
    header, *rows = (row.split(",") for row in open(table).read().splitlines())
    quantum = 64 // 8  # the tuned cartpole DQN's batch of 64
    assert [(r[2], r[3], r[5]) for r in rows] == [
        ("shrink_actors", "1", str(quantum)), ("grow_b", "1", str(2 * quantum)),
        ("shrink_b", "1", str(quantum)), ("give_core_back", "2", "0")]


def test_process_actors_load_weights_from_the_shared_double_buffer():
    from hetrl.actors.worker import ActorWorker, cpu_copy
    from hetrl.quant.spec import QuantSpec
    from hetrl.actors.shared import flatten

    c = build_job("algo=dqn", "algo.hidden=[8]", "env=cartpole")
    learner = c.learner
    worker = ActorWorker(0, 1, cpu_copy(learner), c.make_envs, seed=0, spec=QuantSpec())
    buf = DoubleBuffer(flatten(learner.policy()).numel())
    weights = torch.arange(flatten(learner.policy()).numel(), dtype=torch.float32)
    buf.write(0, weights)
    chunk = worker.collect(buf, 2, 0, 0.0)  # handed over once, then read by version tag
    assert chunk.stats["pulls"] == 1.0 and torch.equal(flatten(worker.shadow), weights)
    assert worker.collect(None, 2, 2, 0.0).stats["pulls"] == 0.0  # no new version: no load
    buf.write(1, weights + 1)
    assert worker.collect(None, 2, 4, 0.0).stats["pulls"] == 1.0
    assert torch.equal(flatten(worker.shadow), weights + 1)
    # a version published while a chunk runs is acted with from the next vector step on
    step, acted = worker.envs.step, []

    def publishing_step(actions):
        if not acted:
            buf.write(2, weights + 2)
        acted.append(flatten(worker.shadow)[0].item())
        return step(actions)

    worker.envs.step = publishing_step
    assert worker.collect(None, 3, 6, 0.0).stats["pulls"] == 1.0
    assert acted == [1.0, 2.0, 2.0]


def test_pearl_defaults_to_prioritized_replay_and_counts_real_collisions(tmp_path):
    """PEARL's replay manager is the sum tree: scheduler=pearl brings replay=prioritized, whose
    batches carry their slots, so a ring small enough to wrap between a batch's sampling and
    its priority update shows collisions (with the uniform ring they always read 0)."""
    from hetrl.config.store import register
    from hetrl.options import compose_job

    register()
    cfg, _ = compose_job("algo=dqn", "scheduler=pearl")
    assert cfg.replay._target_ == "hetrl.replay.prioritized.PrioritizedReplay"
    cfg, _ = compose_job("algo=dqn", "scheduler=pearl", "replay=uniform")  # still a choice
    assert cfg.replay._target_ == "hetrl.replay.uniform.UniformReplay"
    result = _short_run(tmp_path, "pearl", "algo.buffer_size=128", "algo.batch_size=64")
    assert result["pearl/collisions"] > 0


def _ring_put(ring, chunk, conn):  # an actor process: the arrays go to shared memory
    conn.send(ring.put(chunk))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_chunk_ring_carries_a_chunk_through_shared_memory(method):
    import multiprocessing as mp
    import pickle

    from hetrl.actors.worker import Chunk
    from hetrl.actors.shared import ChunkRing

    obs_space = gym.spaces.Box(-1, 1, (4,), np.float32)
    act_space = gym.spaces.Discrete(2)
    ring = ChunkRing(16, 2, obs_space, act_space)
    try:
        rng = np.random.default_rng(0)
        chunk = Chunk(3, rng.random((5, 2, 4), dtype=np.float32), rng.integers(0, 2, (5, 2)),
                      rng.random((5, 2)), rng.random((5, 2, 4), dtype=np.float32),
                      rng.random((5, 2)) < 0.3, rng.random((5, 2)) < 0.3, np.array([9.0]),
                      {"steps": 10.0})
        here, there = mp.get_context(method).Pipe()
        p = mp.get_context(method).Process(target=_ring_put, args=(ring, chunk, there))
        p.start()
        slim = here.recv()
        p.join(10)
        assert slim.obs is None and len(pickle.dumps(slim)) < 600  # no arrays on the pipe
        back = ring.get(slim)
        for name in ("obs", "actions", "rewards", "next_obs", "terminated", "truncated"):
            assert np.array_equal(getattr(back, name), getattr(chunk, name)), name
        assert back.stats == {"steps": 10.0} and back.rank == 3
    finally:
        ring.close()


# ---- Algorithm 1's CPU sub-batch b, trained for real ------------------------------------


@pytest.mark.parametrize("algo", ["dqn", "ddpg"])
def test_cpu_trainers_sub_batch_gives_the_whole_batchs_update(algo):
    """b of the BS rows trained on CPU-trainer threads, BS − b on the learner's: one update
    equals the update on the whole batch (gradients, weights, per-row TD errors, metrics),
    for DQN's one stage and DDPG's two (the actor's through a frozen critic)."""
    import copy

    from hetrl.scheduler.pearl_train import CpuTrainers

    env = "cartpole" if algo == "dqn" else "pendulum"
    c = build_job(f"algo={algo}", f"env={env}", "algo.hidden=[16]", "algo.batch_size=32",
                  "replay=prioritized", "compile=false",
                  *(["algo.target_update_interval=1"] if algo == "dqn" else []))
    rng = np.random.default_rng(0)
    space = c.envs.single_action_space
    for _ in range(64):
        c.replay.add(rng.random((1, *c.envs.single_observation_space.shape), np.float32),
                     np.array([space.sample()]), rng.random(1), rng.random(
                         (1, *c.envs.single_observation_space.shape), np.float32),
                     rng.random(1) < 0.1, np.zeros(1, bool))
    batch = c.replay.sample(32)
    whole, split = c.learner, copy.deepcopy(c.learner)
    trainers = CpuTrainers(split, threads=2)
    try:
        trainers.set(trainers=2, b=12)
        assert split.split_loss is not None
        expected, got = whole.learn(batch), split.learn(batch)
    finally:
        trainers.close()
    assert trainers.train_cpu_s > 0 and split.split_loss is None
    assert expected.keys() == got.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=1e-6, rtol=1e-5)
    for (name, p), q in zip(whole.named_parameters(), split.parameters()):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            torch.testing.assert_close(q.grad, p.grad, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(q, p, atol=1e-6, rtol=1e-5)


def _ring_put_two(ring, chunks, conn):  # an actor two chunks ahead of the host's reads
    for chunk in chunks:
        conn.send(ring.put(chunk))


def test_a_ring_of_two_slots_holds_two_chunks_the_host_has_not_read():
    """PEARL asks each actor for two chunks at a time: the second is written before the host
    reads the first, into the other slot."""
    import multiprocessing as mp

    from hetrl.actors.shared import ChunkRing
    from hetrl.actors.worker import Chunk

    obs_space = gym.spaces.Box(-1, 1, (4,), np.float32)
    ring = ChunkRing(4, 1, obs_space, gym.spaces.Discrete(2), slots=2)
    try:
        rng = np.random.default_rng(0)
        chunks = [Chunk(0, rng.random((4, 1, 4), dtype=np.float32), rng.integers(0, 2, (4, 1)),
                        rng.random((4, 1)), rng.random((4, 1, 4), dtype=np.float32),
                        np.zeros((4, 1), bool), np.zeros((4, 1), bool), np.zeros(0),
                        {"steps": 4.0}) for _ in range(2)]
        here, there = mp.get_context("fork").Pipe()
        p = mp.get_context("fork").Process(target=_ring_put_two, args=(ring, chunks, there))
        p.start()
        p.join(10)  # both written, none read yet
        for chunk in chunks:
            back = ring.get(here.recv())
            assert np.array_equal(back.obs, chunk.obs) and back.stats == {"steps": 4.0}
    finally:
        ring.close()
