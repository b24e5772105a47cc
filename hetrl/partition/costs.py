"""What a partitioner sees: the seconds of each node on each device, resources, link costs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetrl.partition.graph import TaskGraph


@dataclass
class CostTable:
    """Costs of one task graph on one platform under one precision policy.

    `seconds[i, k]` is node i's time on device k (np.inf where i may not run on k);
    `comm[e, k, l]` is the transfer time of edge e from device k to device l (0 on k == l);
    `usage[r][i, k]` is what node i takes of resource r when placed on device k, whichever
    device r lives on (an AIE node takes PL LUTs for its data movers), and `capacity[r]` is
    the amount of r there is. So a plan fits when, for every r, all its nodes together take
    at most `capacity[r]` (`objective.resource_use`).
    """

    graph: TaskGraph
    devices: list[str]
    seconds: np.ndarray  # (n_nodes, n_devices)
    comm: np.ndarray  # (n_edges, n_devices, n_devices)
    usage: dict[str, np.ndarray]  # resource -> (n_nodes, n_devices)
    capacity: dict[str, float]  # resource -> amount (np.inf: unconstrained)
    # measured costs in more than one dtype (the host, precision=mixed): the dtype of node i
    # on device k that `seconds[i, k]` is the time of, and each dtype's own seconds
    dtypes: list[list[str]] | None = None
    by_dtype: dict[str, np.ndarray] | None = None


@dataclass
class Plan:
    """A device for every node and a schedule a device could run."""

    devices: list[str]
    assignment: list[int]  # device index per node
    start: list[float]  # seconds
    finish: list[float]
    makespan: float  # of the realized (list-scheduled) schedule
    objective: float  # the solver's objective (the ILP bound); == makespan for heuristics
    method: str  # "ilp", "heft", "single:<device>", ...
    status: str = "ok"  # solver status, e.g. "Optimal", "Not Solved (time limit)"
    dtypes: list[str] | None = None  # per node, where measured costs chose them (the host)
