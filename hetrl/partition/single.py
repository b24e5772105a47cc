"""The single-device baseline: every node on one named device."""

from __future__ import annotations

import numpy as np

from hetrl.partition.costs import CostTable, Plan
from hetrl.partition.objective import resource_violations, runnable
from hetrl.partition.schedule import list_schedule


class SinglePartitioner:
    """Every node on `device`. A node that cannot run there (seconds = inf, e.g. a non-MM
    layer on the AIE) falls back to its fastest allowed device, as the paper's AIE-only
    baseline keeps non-MM layers elsewhere. Capacities are not enforced (a baseline may not fit):
    a plan that exceeds one has a status starting with "resource-infeasible"."""

    def __init__(self, device: str) -> None:
        self.device = device

    def partition(self, costs: CostTable) -> Plan:
        if self.device not in costs.devices:
            raise ValueError(f"partitioner.device={self.device!r} is not a device of this "
                             f"platform: valid devices are {costs.devices}")
        k = costs.devices.index(self.device)
        allowed = runnable(costs)
        fastest = np.where(allowed, costs.seconds, np.inf).argmin(axis=1)
        assignment = [k if allowed[i, k] else int(fastest[i]) for i in range(len(allowed))]
        violations = resource_violations(costs, assignment)
        status = "resource-infeasible: " + "; ".join(violations) if violations else "ok"
        return list_schedule(costs, assignment).plan(costs.devices, f"single:{self.device}",
                                                     status=status)
