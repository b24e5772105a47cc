"""List scheduling: turn an assignment into a schedule a platform could run.

Each device is one serial queue (a node starts when its device is free and all its inputs have
arrived); an edge between two devices delays its input by `CostTable.comm[e, k, l]`. Transfers
overlap with computation and links have no contention. Nodes are appended to their device's
queue, never inserted into an idle gap.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hetrl.partition.costs import CostTable, Plan
from hetrl.partition.graph import TaskGraph


@dataclass(frozen=True)
class Schedule:
    assignment: list[int]
    start: list[float]
    finish: list[float]
    makespan: float

    def plan(self, devices: list[str], method: str, objective: float | None = None,
             status: str = "ok") -> Plan:
        """This schedule as a plan; the objective defaults to the makespan (heuristics)."""
        return Plan(devices=list(devices), assignment=list(self.assignment),
                    start=list(self.start), finish=list(self.finish), makespan=self.makespan,
                    objective=self.makespan if objective is None else objective,
                    method=method, status=status)


def priority_order(graph: TaskGraph, priority: Sequence[float]) -> list[int]:
    """A topological order taking, among the ready nodes, the lowest priority value first
    (ties by index), so that any priority, even one that disagrees with an edge, is valid."""
    indegree = [0] * len(graph.nodes)
    succs: list[list[int]] = [[] for _ in graph.nodes]
    for edge in graph.edges:
        indegree[edge.dst] += 1
        succs[edge.src].append(edge.dst)
    ready = [(priority[i], i) for i, d in enumerate(indegree) if d == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for j in succs[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                heapq.heappush(ready, (priority[j], j))
    if len(order) != len(graph.nodes):
        raise ValueError("the task graph has a cycle")
    return order


def upward_rank_order(graph: TaskGraph, node_cost: np.ndarray, edge_cost: np.ndarray) -> list[int]:
    """Nodes by decreasing upward rank: rank(i) = w_i + max_{e=(i,j)} (c_e + rank(j))."""
    rank = np.asarray(node_cost, dtype=float).copy()
    out: list[list[int]] = [[] for _ in graph.nodes]
    for e, edge in enumerate(graph.edges):
        out[edge.src].append(e)
    for i in reversed(graph.topological_order()):
        tail = [edge_cost[e] + rank[graph.edges[e].dst] for e in out[i]]
        rank[i] += max(tail, default=0.0)
    return priority_order(graph, -rank)


class Timeline:
    """Serial device queues filled one node at a time (shared by list scheduling and HEFT)."""

    def __init__(self, costs: CostTable) -> None:
        n = len(costs.graph.nodes)
        self.costs = costs
        self.incoming: list[list[int]] = [[] for _ in range(n)]
        for e, edge in enumerate(costs.graph.edges):
            self.incoming[edge.dst].append(e)
        self.assignment = [-1] * n
        self.start = [float("nan")] * n
        self.finish = [float("nan")] * n
        self.free = [0.0] * len(costs.devices)

    def earliest_start(self, i: int, k: int) -> float:
        """When node i could start on device k, given the nodes placed so far."""
        arrivals = [0.0]
        for e in self.incoming[i]:
            src = self.costs.graph.edges[e].src
            if self.assignment[src] < 0:
                raise ValueError(f"node {i} is scheduled before its predecessor {src}")
            arrivals.append(self.finish[src] + self.costs.comm[e, self.assignment[src], k])
        return max(max(arrivals), self.free[k])

    def place(self, i: int, k: int) -> None:
        start = self.earliest_start(i, k)
        self.assignment[i], self.start[i] = k, start
        self.finish[i] = self.free[k] = start + float(self.costs.seconds[i, k])

    def schedule(self) -> Schedule:
        return Schedule(list(self.assignment), list(self.start), list(self.finish),
                        max(self.finish, default=0.0))


def assigned_costs(costs: CostTable, assignment: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Each node's duration and each edge's transfer time under `assignment`."""
    a = np.asarray(assignment)
    src = np.array([e.src for e in costs.graph.edges], dtype=int)
    dst = np.array([e.dst for e in costs.graph.edges], dtype=int)
    node = costs.seconds[np.arange(len(a)), a]
    edge = costs.comm[np.arange(len(src)), a[src], a[dst]] if len(src) else np.zeros(0)
    return node, edge


def list_schedule(costs: CostTable, assignment: Sequence[int],
                  order: Sequence[int] | None = None) -> Schedule:
    """Schedule a fixed assignment in `order` (default: decreasing upward rank)."""
    if order is None:
        order = upward_rank_order(costs.graph, *assigned_costs(costs, assignment))
    timeline = Timeline(costs)
    for i in order:
        timeline.place(i, assignment[i])
    return timeline.schedule()
