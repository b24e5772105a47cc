"""Plan a learner's training step on a modeled platform, beside the platform's baselines."""

from __future__ import annotations

import json
from dataclasses import dataclass

from hetrl.algos.base import Learner
from hetrl.partition.costs import CostTable, Plan
from hetrl.partition.graph import TaskGraph
from hetrl.partition.single import SinglePartitioner
from hetrl.platform.model import ModeledPlatform
from hetrl.schema import BaselineSpec


@dataclass
class StepPlan:
    graph: TaskGraph
    costs: CostTable
    plan: Plan
    baselines: dict[str, Plan]

    def metrics(self, batch_size: int) -> dict[str, float]:
        """Modeled figures (never measured ones): `eps_platform`, step times, speedups."""
        plan = self.plan
        metrics = {
            "eps_platform": batch_size / plan.makespan,
            "platform/step_s": plan.makespan,
            "platform/step_bound_s": plan.objective,
        }
        for name, baseline in self.baselines.items():
            metrics[f"speedup_vs_{name}"] = baseline.makespan / plan.makespan
        for k, device in enumerate(plan.devices):
            metrics[f"platform/nodes_{device}"] = float(plan.assignment.count(k))
        return metrics

    def to_json(self) -> str:
        def describe(plan: Plan) -> dict:
            return {"method": plan.method, "status": plan.status, "makespan_s": plan.makespan,
                    "objective_s": plan.objective}

        nodes = [
            {"name": node.name, "kind": node.kind.value, "flops": node.flops,
             "device": self.plan.devices[k], "start_s": start, "finish_s": finish}
            for node, k, start, finish in zip(self.graph.nodes, self.plan.assignment,
                                              self.plan.start, self.plan.finish)
        ]
        return json.dumps({"plan": describe(self.plan), "nodes": nodes,
                           "baselines": {n: describe(p) for n, p in self.baselines.items()}},
                          indent=1)


def plan_step(learner: Learner, platform: ModeledPlatform, precision, partitioner) -> StepPlan:
    """The learner's step graph at its batch size, partitioned under the precision policy's
    dtypes, and each baseline of the platform (all nodes on one device, in one dtype)."""
    graph = learner.task_graph(learner.batch_size)
    costs = platform.cost_table(graph, precision.dtype_chooser(platform))
    baselines = {name: _baseline(graph, platform, spec) for name, spec in platform.baselines.items()}
    return StepPlan(graph, costs, partitioner.partition(costs), baselines)


def _baseline(graph: TaskGraph, platform: ModeledPlatform, spec: BaselineSpec) -> Plan:
    clocked = platform if spec.clock == 1.0 else platform.clocked(spec.device, spec.clock)
    costs = clocked.cost_table(graph, lambda node, device: spec.dtype.value,
                               master_weight_sync=spec.master_weight_sync)
    return SinglePartitioner(spec.device).partition(costs)
