"""The exact value of AP-DRL's ILP objective for fixed assignments, and their feasibility.

With x fixed, eqs. (2)-(7) (+ the communication extension, spec A.2.5) leave only the start
times free, so the optimum is T = max(longest path with the assigned durations and the
cross-device edge costs, the largest per-device serial load Σ_{i∈V_k} t_{i,k}), and the
assignment is infeasible (T = inf) when a node sits on a device it cannot run on or any
resource's use exceeds its capacity. The tests use this as the brute-force reference.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hetrl.partition.costs import CostTable


def runnable(costs: CostTable) -> np.ndarray:
    """(n_nodes, n_devices) mask of where each node may run; ValueError if one runs nowhere."""
    allowed = np.isfinite(costs.seconds)
    stuck = [costs.graph.nodes[i].name for i in np.flatnonzero(~allowed.any(axis=1))]
    if stuck:
        raise ValueError(f"nodes {stuck} cannot run on any of the devices {costs.devices}")
    return allowed


def resource_use(costs: CostTable, assignments: np.ndarray) -> dict[str, np.ndarray]:
    """Each resource's total use, (m,), for each row of `assignments` (m, n): what every node
    takes of it on the device it is placed on, whichever device the resource lives on."""
    a = np.atleast_2d(assignments)
    nodes = np.arange(a.shape[1])
    return {r: use[nodes, a].sum(axis=1) for r, use in costs.usage.items()}


def resource_violations(costs: CostTable, assignment: Sequence[int]) -> list[str]:
    """Human-readable 'resource: used > capacity' for every exceeded capacity."""
    return [f"{r}: {used[0]:g} > {costs.capacity[r]:g}"
            for r, used in resource_use(costs, np.asarray(assignment)).items()
            if used[0] > costs.capacity[r]]


def objectives(costs: CostTable, assignments: np.ndarray, communication: bool = True) -> np.ndarray:
    """The ILP optimum T for each row of `assignments` (m, n_nodes) of device indices."""
    a = np.atleast_2d(np.asarray(assignments, dtype=int))
    graph, nodes = costs.graph, np.arange(a.shape[1])
    duration = costs.seconds[nodes, a]  # (m, n)
    finish = np.zeros_like(duration)
    incoming: list[list[int]] = [[] for _ in nodes]
    for e, edge in enumerate(graph.edges):
        incoming[edge.dst].append(e)
    for j in graph.topological_order():
        ready = np.zeros(len(a))
        for e in incoming[j]:
            i = graph.edges[e].src
            comm = costs.comm[e, a[:, i], a[:, j]] if communication else 0.0
            ready = np.maximum(ready, finish[:, i] + comm)
        finish[:, j] = ready + duration[:, j]
    on = a[:, :, None] == np.arange(len(costs.devices))
    load = np.where(on, duration[:, :, None], 0.0).sum(axis=1)  # (m, K)
    total = np.maximum(finish.max(axis=1), load.max(axis=1))
    for r, used in resource_use(costs, a).items():
        total[used > costs.capacity[r]] = np.inf
    return total


def objective(costs: CostTable, assignment: Sequence[int], communication: bool = True) -> float:
    """The ILP optimum T of one assignment (inf if infeasible)."""
    return float(objectives(costs, np.asarray([assignment]), communication)[0])
