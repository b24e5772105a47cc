"""HEFT (Topcuoglu et al., 2002): the list-scheduling baseline and the ILP's warm start."""

from __future__ import annotations

import numpy as np

from hetrl.partition.costs import CostTable, Plan
from hetrl.partition.objective import runnable
from hetrl.partition.schedule import Timeline, upward_rank_order


class HeftPartitioner:
    """Nodes by decreasing upward rank (mean cost over the devices a node may run on, mean
    transfer time over the ordered pairs of distinct devices), each to the device where it
    finishes first. Non-insertion variant: a node joins the end of its device's queue.

    Resources are respected greedily: a device is skipped where the node would take more of
    some resource than is left (a node's use counts wherever the resource lives). If every
    device is, the node goes to its earliest-finish device anyway and the plan's status starts
    with "resource-infeasible".
    """

    def partition(self, costs: CostTable) -> Plan:
        allowed = runnable(costs)
        n_devices = len(costs.devices)
        mean_seconds = np.where(allowed, costs.seconds, 0.0).sum(axis=1) / allowed.sum(axis=1)
        distinct = ~np.eye(n_devices, dtype=bool)
        mean_comm = (costs.comm[:, distinct].mean(axis=1) if n_devices > 1
                     else np.zeros(len(costs.graph.edges)))
        used = dict.fromkeys(costs.usage, 0.0)  # each resource's total, wherever it lives
        timeline, overflow = Timeline(costs), []
        for i in upward_rank_order(costs.graph, mean_seconds, mean_comm):
            candidates = np.flatnonzero(allowed[i])
            fits = [k for k in candidates
                    if all(used[r] + costs.usage[r][i, k] <= costs.capacity[r] for r in used)]
            if not fits:
                overflow.append(costs.graph.nodes[i].name)
            k = min(fits or candidates,
                    key=lambda k: timeline.earliest_start(i, k) + costs.seconds[i, k])
            timeline.place(i, int(k))
            for r in used:
                used[r] += costs.usage[r][i, k]
        status = f"resource-infeasible: no room for {overflow}" if overflow else "ok"
        return timeline.schedule().plan(costs.devices, "heft", status=status)
