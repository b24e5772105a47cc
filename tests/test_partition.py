"""Partitioners on random cost tables: the ILP against brute force (spec C, T1), baselines,
realizable schedules, resources, and the Hydra options."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hetrl.partition.costs import CostTable, Plan
from hetrl.partition.graph import Edge, TaskGraph
from hetrl.config.store import register
from hetrl.options import made_option
from hetrl.partition.heft import HeftPartitioner
from hetrl.partition.objective import objective, objectives, resource_violations
from hetrl.partition.schedule import list_schedule
from hetrl.partition.single import SinglePartitioner
from hetrl.partition.synthetic import US, random_costs, random_dag

# (seed, nodes, tightness): at 0.2-0.3 the capacities bind in every case, at 1.0 never
CASES = [(0, 6, 0.3), (1, 7, 0.3), (2, 8, 0.2), (3, 8, 0.3), (4, 9, 0.3), (5, 10, 0.3),
         (6, 9, 1.0), (7, 10, 0.2), (8, 10, 0.3), (9, 10, 1.0)]


def ilp(**values: object) -> object:
    """`partitioner=ilp` as its YAML makes it, `values` in place of its own."""
    register()
    return made_option("partitioner", "ilp", **values)


def costs_for(seed: int, n_nodes: int, tightness: float = 0.3) -> CostTable:
    return random_costs(np.random.default_rng(seed), n_nodes, tightness=tightness)


def brute_force(costs: CostTable, communication: bool = True) -> float:
    """The best ILP objective over all |K|^|V| assignments."""
    n, k = costs.seconds.shape
    every = np.array(list(itertools.product(range(k), repeat=n)))
    return float(objectives(costs, every, communication).min())


def assert_realizable(costs: CostTable, plan: Plan) -> None:
    """Durations, precedence with transfer times, one node at a time per device."""
    start, finish, a = map(np.asarray, (plan.start, plan.finish, plan.assignment))
    np.testing.assert_allclose(finish - start, costs.seconds[np.arange(len(a)), a], rtol=1e-12)
    for e, edge in enumerate(costs.graph.edges):
        arrival = finish[edge.src] + costs.comm[e, a[edge.src], a[edge.dst]]
        assert start[edge.dst] >= arrival - 1e-12
    for k in range(len(costs.devices)):
        on_k = np.flatnonzero(a == k)
        ordered = on_k[np.argsort(start[on_k])]
        assert np.all(start[ordered[1:]] >= finish[ordered[:-1]] - 1e-12)
    assert plan.makespan == pytest.approx(finish.max(), rel=1e-12)


@pytest.mark.parametrize("seed, n_nodes, tightness", CASES)
def test_ilp_equals_brute_force(seed: int, n_nodes: int, tightness: float) -> None:
    costs = costs_for(seed, n_nodes, tightness)
    plan = ilp().partition(costs)
    assert plan.status.startswith("Optimal") and plan.method == "ilp"
    assert plan.objective == pytest.approx(brute_force(costs), rel=1e-6)
    assert plan.objective <= objective(costs, plan.assignment) * (1 + 1e-9)
    assert resource_violations(costs, plan.assignment) == []
    assert plan.makespan >= plan.objective
    assert_realizable(costs, plan)


def test_ilp_without_communication_equals_its_brute_force() -> None:
    costs = costs_for(6, 8)
    plan = ilp(communication=False).partition(costs)
    assert plan.objective == pytest.approx(brute_force(costs, communication=False), rel=1e-6)
    assert plan.makespan >= plan.objective  # the realized schedule still pays for transfers


@pytest.mark.parametrize("seed, n_nodes, tightness", CASES[:4])
def test_ilp_beats_every_feasible_baseline(seed: int, n_nodes: int, tightness: float) -> None:
    costs = costs_for(seed, n_nodes, tightness)
    plan = ilp().partition(costs)
    best = plan.objective
    heft = HeftPartitioner().partition(costs)
    assert heft.status == "ok" and heft.objective == heft.makespan
    assert best <= objective(costs, heft.assignment) * (1 + 1e-9)
    assert plan.makespan <= heft.makespan  # the realized plan, too
    assert_realizable(costs, heft)
    for device in costs.devices:
        single = SinglePartitioner(device).partition(costs)
        assert_realizable(costs, single)
        feasible = single.status == "ok"
        assert np.isfinite(objective(costs, single.assignment)) == feasible
        if feasible:
            assert best <= objective(costs, single.assignment) * (1 + 1e-9)
            assert plan.makespan <= single.makespan


def test_capacity_binds() -> None:
    """Four independent nodes, all faster on d1, which has room for two of them."""
    graph = random_dag(np.random.default_rng(0), 4, width=4)
    graph.edges = []
    seconds = np.array([[100.0, 10.0]] * 4) * US
    costs = CostTable(graph, ["d0", "d1"], seconds, np.zeros((0, 2, 2)),
                      {"dsp": np.array([[0.0, 1.0]] * 4)}, {"dsp": 2.0})
    plan = ilp().partition(costs)
    assert plan.assignment.count(1) == 2
    assert plan.objective == pytest.approx(200 * US) == pytest.approx(brute_force(costs))
    assert SinglePartitioner("d1").partition(costs).status.startswith("resource-infeasible")
    assert HeftPartitioner().partition(costs).assignment.count(1) == 2


def test_no_feasible_assignment_is_named() -> None:
    costs = costs_for(0, 5)
    costs.capacity = dict.fromkeys(costs.capacity, 0.0)
    costs.usage = {r: np.ones((5, 3)) for r in costs.usage}
    with pytest.raises(ValueError, match="resource capacities"):
        ilp().partition(costs)
    assert HeftPartitioner().partition(costs).status.startswith("resource-infeasible")


def test_a_resource_counts_wherever_its_users_are_placed() -> None:
    """Two independent nodes that may run only on d1 or d2 each take one "lut", which lives on
    d1, on either device (as an AIE node takes PL LUTs): room for two fits both, room for one
    fits no assignment."""
    graph = random_dag(np.random.default_rng(0), 2, width=2)
    seconds = np.array([[np.inf, 20.0, 10.0], [np.inf, 10.0, 20.0]]) * US
    costs = CostTable(graph, ["d0", "d1", "d2"], seconds, np.zeros((0, 3, 3)),
                      {"lut": np.array([[0.0, 1.0, 1.0]] * 2)}, {"lut": 2.0})
    plan = ilp().partition(costs)
    assert plan.status == "Optimal" and plan.assignment == [2, 1]
    costs.capacity = {"lut": 1.0}
    assert resource_violations(costs, plan.assignment) == ["lut: 2 > 1"]
    with pytest.raises(ValueError, match="resource capacities"):
        ilp().partition(costs)
    assert HeftPartitioner().partition(costs).status.startswith("resource-infeasible")
    for device in ("d1", "d2"):
        assert SinglePartitioner(device).partition(costs).status.startswith("resource-infeasible")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_disjunctive_objective_is_a_realized_makespan(seed: int) -> None:
    costs = costs_for(seed, 7)
    exact = ilp(disjunctive=True).partition(costs)
    assert exact.status == "Optimal" and exact.method == "ilp:disjunctive"
    assert exact.makespan == pytest.approx(exact.objective, rel=1e-6)
    assert exact.objective >= ilp().partition(costs).objective * (1 - 1e-6)
    assert exact.makespan <= HeftPartitioner().partition(costs).makespan * (1 + 1e-6)
    assert_realizable(costs, exact)


def test_time_limit_keeps_at_least_the_heft_start() -> None:
    """30 nodes are too many for the disjunctive model in 1 s; the HEFT warm start bounds it."""
    costs = costs_for(30, 30, tightness=0.4)
    plan = ilp(time_limit_s=1.0, disjunctive=True).partition(costs)
    assert plan.status == "Feasible (time limit)"
    assert plan.makespan <= HeftPartitioner().partition(costs).makespan * (1 + 1e-9)
    assert plan.makespan == pytest.approx(plan.objective, rel=1e-6)
    assert_realizable(costs, plan)


def test_single_device_falls_back_and_names_bad_devices() -> None:
    costs = costs_for(3, 8)
    cannot = np.flatnonzero(np.isinf(costs.seconds[:, 2]))
    assert len(cannot) > 0
    plan = SinglePartitioner("d2").partition(costs)
    assert plan.method == "single:d2"
    assert all(plan.assignment[i] == 2 for i in range(8) if i not in cannot)
    fastest = np.where(np.isfinite(costs.seconds), costs.seconds, np.inf).argmin(axis=1)
    assert all(plan.assignment[i] == fastest[i] for i in cannot)
    with pytest.raises(ValueError, match=r"'gpu'.*\['d0', 'd1', 'd2'\]"):
        SinglePartitioner("gpu").partition(costs)


def test_list_schedule_rejects_an_order_against_an_edge() -> None:
    costs = costs_for(0, 6)
    edge = costs.graph.edges[0]
    with pytest.raises(ValueError, match="before its predecessor"):
        list_schedule(costs, [0] * 6, [edge.dst, edge.src] + [
            i for i in range(6) if i not in (edge.src, edge.dst)])


def test_cycles_are_refused() -> None:
    graph = TaskGraph(random_dag(np.random.default_rng(0), 2).nodes,
                      [Edge(0, 1, 1.0), Edge(1, 0, 1.0)])
    with pytest.raises(ValueError, match="cycle"):
        objectives(CostTable(graph, ["d0"], np.ones((2, 1)), np.zeros((2, 1, 1)), {}, {}),
                   np.zeros((1, 2), dtype=int))
