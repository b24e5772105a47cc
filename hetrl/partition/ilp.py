"""AP-DRL's ILP partitioner (spec A.2.5), solved with PuLP + CBC."""

from __future__ import annotations

import itertools
import warnings
from dataclasses import replace

import numpy as np
import pulp

from hetrl.partition.costs import CostTable, Plan
from hetrl.partition.graph import TaskGraph
from hetrl.partition.heft import HeftPartitioner
from hetrl.partition.objective import objective, runnable
from hetrl.partition.schedule import list_schedule, priority_order
from hetrl.partition.single import SinglePartitioner


class IlpPartitioner:
    """AP-DRL's partitioning ILP, eqs. (2)-(7). The paper gives only a one-line description of
    each equation; the bodies here are **reconstructed** from that prose (spec A.2.5):

        (2) min T   (3) T ≥ S_i + Σ_k x_ik t_ik   (4) Σ_k x_ik = 1
        (5) S_j ≥ S_i + Σ_k x_ik t_ik  ∀ (i, j) ∈ E   (6) T ≥ Σ_i x_ik t_ik  ∀ k
        (7) Σ_i Σ_k x_ik r_ik ≤ R_r  ∀ r, one per resource: a node's use of r counts wherever
            it is placed ("AIE nodes also use some PL resource", spec A.2.5; infinite R omitted)
        x binary, S ≥ 0 continuous; x_ik does not exist (is fixed to 0) where t_ik = inf.

    `communication` adds Ext. 1 to (5): + Σ_{k≠l} c_e^{kl} y_e^{kl}, y_e^{kl} ≥ x_ik + x_jl − 1,
    y ≥ 0 continuous, c = `CostTable.comm`. `disjunctive` adds Ext. 2: for every pair of nodes
    with no path between them and every device both may use, an ordering binary and big-M
    constraints that forbid overlap, making T an exact makespan (many binaries: small graphs
    only). Without it, (6) only bounds each device's serial load, so T is a lower bound.

    Times are divided by the largest node time before solving, so that CBC's absolute
    tolerances act as relative ones. The solve starts from HEFT's plan when that fits the
    capacities. The plan's objective is the solver's T: without Ext. 2, the optimum of a
    bound that is ≤ every assignment's makespan. Its schedule is the shortest realized one
    among the solved assignment (list-scheduled in upward-rank or the solver's start-time
    order), the HEFT warm start and every single-device plan that fits the capacities: the
    bound may prefer an assignment whose serial queues realize worse than a heuristic's, and a
    plan must never run slower than the baselines it is compared with. So makespan ≥
    objective (equal, up to solver tolerance, in the disjunctive model, whose start-time
    order realizes T). Status: "Optimal", "Feasible (time limit)", or, if CBC found nothing
    in time, "Not Solved (time limit)"; "; realized by <method>" names a heuristic whose
    schedule was shorter.
    """

    def __init__(self, time_limit_s: float, communication: bool, disjunctive: bool) -> None:
        if time_limit_s <= 0:
            raise ValueError(f"time_limit_s={time_limit_s!r} is invalid: valid values are > 0")
        self.time_limit_s = time_limit_s
        self.communication = communication
        self.disjunctive = disjunctive

    @property
    def method(self) -> str:
        return "ilp:disjunctive" if self.disjunctive else "ilp"

    def partition(self, costs: CostTable) -> Plan:
        model = _Model(costs, self.communication, self.disjunctive)
        heft = HeftPartitioner().partition(costs)
        if heft.status == "ok":
            model.warm_start(heft)
        model.problem.solve(_cbc(self.time_limit_s, warm_start=heft.status == "ok"))
        solution = model.problem.sol_status
        if solution == pulp.LpSolutionInfeasible:
            raise ValueError(f"no assignment fits the resource capacities {costs.capacity}")
        heuristics = [plan for plan in (heft, *(SinglePartitioner(device).partition(costs)
                                                for device in costs.devices))
                      if plan.status == "ok"]
        if solution not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
            if heft.status != "ok":
                raise RuntimeError(f"CBC found no assignment within {self.time_limit_s} s")
            return self._realized(heft.assignment, heft.start, heft.makespan,
                                  "Not Solved (time limit)", costs, heuristics)
        status = "Optimal" if solution == pulp.LpSolutionOptimal else "Feasible (time limit)"
        return self._realized(model.assignment(), model.starts(), model.total(), status, costs,
                              heuristics)

    def _realized(self, assignment: list[int], start: list[float], total: float, status: str,
                  costs: CostTable, heuristics: list[Plan]) -> Plan:
        """The shortest schedule of `assignment` (upward-rank or `start` order) or of a
        heuristic's plan, with the solver's objective: `total` is the disjunctive model's T,
        lowered to the plan's makespan where a time-limited incumbent's T is longer (every
        realized schedule that fits is a point of that model); the other model's T is
        recomputed exactly."""
        value = total if self.disjunctive else objective(costs, assignment, self.communication)
        schedules = [list_schedule(costs, assignment),
                     list_schedule(costs, assignment, priority_order(costs.graph, start))]
        solved = min(schedules, key=lambda schedule: schedule.makespan)
        plan = solved.plan(costs.devices, self.method, objective=value, status=status)
        shorter = min(heuristics, key=lambda h: h.makespan, default=plan)
        if shorter.makespan < plan.makespan * (1 - 1e-9):
            plan = replace(shorter, objective=value, method=self.method,
                           status=f"{status}; realized by {shorter.method}")
        if self.disjunctive and plan.makespan < value:
            plan = replace(plan, objective=plan.makespan)
        return plan


class _Model:
    """The PuLP problem of one cost table, in units of the largest node time."""

    def __init__(self, costs: CostTable, communication: bool, disjunctive: bool) -> None:
        allowed = runnable(costs)
        self.costs, self.allowed = costs, allowed
        self.scale = float(costs.seconds[allowed].max(initial=0.0)) or 1.0
        t = np.where(allowed, costs.seconds, 0.0) / self.scale
        n, n_devices = allowed.shape
        p = self.problem = pulp.LpProblem("apdrl_partition", pulp.LpMinimize)
        self.x = {(i, k): p.add_variable(f"x_{i}_{k}", cat=pulp.LpBinary)
                  for i, k in np.argwhere(allowed).tolist()}
        self.start = [p.add_variable(f"S_{i}", lowBound=0) for i in range(n)]
        self.T = p.add_variable("T_total", lowBound=0)
        p += self.T  # (2)
        duration = [pulp.lpSum(t[i, k] * self.x[i, k] for k in np.flatnonzero(allowed[i]))
                    for i in range(n)]
        for i in range(n):
            p += self.T >= self.start[i] + duration[i], f"eq3_{i}"
            p += pulp.lpSum(self.x[i, k] for k in np.flatnonzero(allowed[i])) == 1, f"eq4_{i}"
        for e, edge in enumerate(costs.graph.edges):
            i, j = edge.src, edge.dst
            transfer = self._transfer(e, i, j) if communication else 0
            p += self.start[j] >= self.start[i] + duration[i] + transfer, f"eq5_{e}"
        for k in range(n_devices):
            on_k = np.flatnonzero(allowed[:, k])
            p += self.T >= pulp.lpSum(t[i, k] * self.x[i, k] for i in on_k), f"eq6_{k}"
        for r, capacity in costs.capacity.items():
            if np.isfinite(capacity):
                use = costs.usage[r]
                p += (pulp.lpSum(use[i, k] * x for (i, k), x in self.x.items() if use[i, k])
                      <= capacity), f"eq7_{r}"
        self.order: dict[tuple[int, int], pulp.LpVariable] = {}
        if disjunctive:
            self._forbid_overlap(t)

    def _transfer(self, e: int, i: int, j: int) -> pulp.LpAffineExpression:
        """Ext. 1: the transfer time of edge e = (i, j) under the (linearized) assignment."""
        terms = []
        for k, l in itertools.permutations(range(len(self.costs.devices)), 2):
            c = self.costs.comm[e, k, l] / self.scale
            if c > 0 and self.allowed[i, k] and self.allowed[j, l]:
                y = self.problem.add_variable(f"y_{e}_{k}_{l}", lowBound=0)
                self.problem += y >= self.x[i, k] + self.x[j, l] - 1, f"ext1_{e}_{k}_{l}"
                terms.append(c * y)
        return pulp.lpSum(terms)

    def _forbid_overlap(self, t: np.ndarray) -> None:
        """Ext. 2: o_ij = 1 puts i before j when both share a device (big-M disjunction)."""
        comm = self.costs.comm / self.scale
        big_m = t.max(axis=1).sum() + (comm.max(axis=(1, 2)).sum() if comm.size else 0.0)
        for i, j in _unordered_pairs(self.costs.graph):
            o = self.order[i, j] = self.problem.add_variable(f"o_{i}_{j}", cat=pulp.LpBinary)
            for k in np.flatnonzero(self.allowed[i] & self.allowed[j]):
                apart = big_m * (2 - self.x[i, k] - self.x[j, k])
                self.problem += (self.start[j] >= self.start[i] + t[i, k] - big_m * (1 - o) - apart,
                                 f"ext2_{i}_{j}_{k}_a")
                self.problem += (self.start[i] >= self.start[j] + t[j, k] - big_m * o - apart,
                                 f"ext2_{i}_{j}_{k}_b")

    def warm_start(self, plan: Plan) -> None:
        for (i, k), x in self.x.items():
            x.setInitialValue(int(plan.assignment[i] == k))
        for (i, j), o in self.order.items():
            o.setInitialValue(int(plan.start[i] <= plan.start[j]))

    def assignment(self) -> list[int]:
        n, n_devices = self.allowed.shape
        value = np.zeros((n, n_devices))
        for (i, k), x in self.x.items():
            value[i, k] = x.value()
        return value.argmax(axis=1).tolist()

    def starts(self) -> list[float]:
        return [s.value() * self.scale for s in self.start]

    def total(self) -> float:
        return self.T.value() * self.scale


def _cbc(time_limit_s: float, warm_start: bool) -> pulp.LpSolver:
    """The CBC binary PuLP bundles (PuLP 3 marks that solver class deprecated for 4.0)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s, warmStart=warm_start)


def _unordered_pairs(graph: TaskGraph) -> list[tuple[int, int]]:
    """Pairs i < j with no path between them in either direction."""
    below = [1 << i for i in range(len(graph.nodes))]  # bit set of i and its descendants
    for i in reversed(graph.topological_order()):
        for j in graph.succs(i):
            below[i] |= below[j]
    return [(i, j) for i, j in itertools.combinations(range(len(graph.nodes)), 2)
            if not (below[i] >> j) & 1 and not (below[j] >> i) & 1]
