"""Plan a learner's training step on a platform, beside the platform's baselines: over modeled
costs (a simulated platform) or over costs measured on this host's devices."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any, Sequence

import gymnasium as gym
import numpy as np

from hetrl.algos.base import Learner
from hetrl.config.platform import BaselineSpec
from hetrl.partition.composer import Composition
from hetrl.partition.costs import CostTable, Plan
from hetrl.partition.graph import TaskGraph
from hetrl.partition.primitives import experience_bytes
from hetrl.partition.single import SinglePartitioner
from hetrl.platform.host import HostPlatform, copy_seconds_per_byte
from hetrl.platform.model import ModeledPlatform
from hetrl.replay.rm_timing import rm_seconds


@dataclass
class StepPlan:
    graph: TaskGraph
    costs: CostTable
    plan: Plan
    baselines: dict[str, Plan]
    measured: bool = False  # costs timed on this host's devices, not modeled
    composition: Composition | None = None  # partitioner=composer: PEARL's RM/Learner placement
    # the host, a precision other than fp32: seconds of one whole update of the learner as it
    # trains ("precision") and in float32 ("float32"), measured in turns (`compare_updates`)
    update_s: dict[str, float] | None = None
    # what the precision policy follows (build's choice): the plan on a modeled platform; on
    # the host, each node in the dtype chosen for the device the learner runs on
    applied: Plan | None = None

    def metrics(self, batch_size: int) -> dict[str, float]:
        """Modeled figures as `eps_platform`, `platform/*`, `speedup_vs_*`; a plan over measured
        per-node costs as `host/plan_*` (a schedule of measured times, beside the loop's own
        measured `eps_host`)."""
        plan = self.plan
        if self.measured:
            prefix, metrics = "host/plan_", {"host/plan_eps": batch_size / plan.makespan}
        else:
            prefix, metrics = "platform/", {"eps_platform": batch_size / plan.makespan}
        metrics[f"{prefix}step_s"] = plan.makespan
        metrics[f"{prefix}step_bound_s"] = plan.objective
        for name, baseline in self.baselines.items():
            metrics[f"{prefix if self.measured else ''}speedup_vs_{name}"] = (
                baseline.makespan / plan.makespan)
        for k, device in enumerate(plan.devices):
            metrics[f"{prefix}nodes_{device}"] = float(plan.assignment.count(k))
        several = self.costs.by_dtype is not None and len(self.costs.by_dtype) > 1
        if plan.dtypes is not None and (several or set(plan.dtypes) != {"float32"}):
            for dtype in sorted(set(plan.dtypes)):
                metrics[f"{prefix}nodes_{dtype}"] = float(plan.dtypes.count(dtype))
        if self.update_s is not None:  # measured whole updates, not a schedule of node times
            metrics["host/update_s"] = self.update_s["precision"]
            metrics["host/update_fp32_s"] = self.update_s["float32"]
            metrics["host/speedup_vs_fp32"] = (self.update_s["float32"]
                                               / self.update_s["precision"])
        if self.composition is not None:  # PEARL's EPS of the whole iteration, Eq. (6)
            metrics.update(self.composition.metrics())
        return metrics

    def to_json(self) -> str:
        def describe(plan: Plan) -> dict:
            return {"method": plan.method, "status": plan.status, "makespan_s": plan.makespan,
                    "objective_s": plan.objective}

        nodes = [
            {"name": node.name, "kind": node.kind.value, "flops": node.flops,
             "device": self.plan.devices[k], "start_s": start, "finish_s": finish,
             "seconds": dict(zip(self.costs.devices, map(float, seconds)))}
            for node, k, start, finish, seconds in zip(
                self.graph.nodes, self.plan.assignment, self.plan.start, self.plan.finish,
                self.costs.seconds)
        ]
        if self.plan.dtypes is not None:
            for i, node in enumerate(nodes):
                node["dtype"] = self.plan.dtypes[i]
        if self.costs.by_dtype is not None and len(self.costs.by_dtype) > 1:
            for i, node in enumerate(nodes):
                node["seconds_by_dtype"] = {
                    device: {dtype: float(table[i, k])
                             for dtype, table in self.costs.by_dtype.items()}
                    for k, device in enumerate(self.costs.devices)}
        return figures_json({
            "costs": "measured" if self.measured else "modeled", "plan": describe(self.plan),
            "nodes": nodes, "baselines": {n: describe(p) for n, p in self.baselines.items()}})


def figures_json(tree: Any) -> str:
    """`tree` as strict JSON (no Infinity, no NaN: every JSON parser reads it), each
    unbounded figure written `null`."""
    return json.dumps(_null_unbounded(tree), indent=1, allow_nan=False)


def _null_unbounded(tree: Any) -> Any:
    """The tree with each infinite or NaN figure (a device that cannot run a node, a plan
    with no finite makespan) as None: JSON has no Infinity, so they are written `null`."""
    if isinstance(tree, dict):
        return {key: _null_unbounded(value) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [_null_unbounded(value) for value in tree]
    if isinstance(tree, float) and not math.isfinite(tree):
        return None
    return tree


def plan_step(learner: Learner, platform: ModeledPlatform, precision, partitioner,
              obs_space: gym.Space | None = None, act_space: gym.Space | None = None
              ) -> StepPlan:
    """The learner's step graph at its batch size, partitioned under the precision policy's
    dtypes, and each baseline of the platform (all nodes on one device, in one dtype)."""
    graph = learner.task_graph(learner.batch_size)
    costs = platform.cost_table(graph, precision.dtype_chooser(platform))
    baselines = {name: _baseline(graph, platform, spec) for name, spec in platform.baselines.items()}
    composition = None
    if hasattr(partitioner, "compose"):  # PEARL's composer places RM and Learner first
        composition = partitioner.compose(platform, graph, learner.batch_size,
                                          _buffer_size(learner),
                                          _experience_bytes(learner, obs_space, act_space))
    return StepPlan(graph, costs, partitioner.partition(costs), baselines,
                    composition=composition)


def _buffer_size(learner: Learner) -> int:
    return int(getattr(learner, "buffer_size", 0) or 8192)


def _experience_bytes(learner: Learner, obs_space: gym.Space | None,
                      act_space: gym.Space | None) -> float:
    """PEARL's E for the env's spaces (flat observation and action sizes; without them, the
    learner's observation shape and one action)."""
    obs = (gym.spaces.flatdim(obs_space) if obs_space is not None
           else int(np.prod(getattr(learner, "obs_shape", (1,)))))
    act = gym.spaces.flatdim(act_space) if isinstance(act_space, gym.spaces.Box) else 1
    return experience_bytes(obs, act)


def _baseline(graph: TaskGraph, platform: ModeledPlatform, spec: BaselineSpec) -> Plan:
    clocked = platform if spec.clock == 1.0 else platform.clocked(spec.device, spec.clock)
    costs = clocked.cost_table(graph, lambda node, device: spec.dtype.value,
                               master_weight_sync=spec.master_weight_sync)
    return SinglePartitioner(spec.device).partition(costs)


def plan_measured_step(learner: Learner, host: HostPlatform, partitioner,
                       obs_space: gym.Space, act_space: gym.Space,
                       dtypes: Sequence[str] = ("float32",), min_speedup: float = 1.0,
                       costs: CostTable | None = None) -> StepPlan:
    """The learner's step graph costed by timing each node on each of the host's devices in
    each of `dtypes` (or given its `costs`, e.g. a timing table of a test), each layer in the
    dtype that measured fastest on each device (`per_layer_dtypes`), partitioned over the
    devices (trivially on a CPU-only host), beside each device alone and, when lower
    precisions were measured, beside the whole step in float32."""
    graph = learner.task_graph(learner.batch_size)
    if costs is None:
        costs = host.cost_table(graph, learner, obs_space, act_space, dtypes, min_speedup)
    composition = None
    if hasattr(partitioner, "compose_measured"):  # PEARL's composer, on measured primitives
        per_byte = copy_seconds_per_byte() if len(costs.devices) > 1 else 0.0
        composition = partitioner.compose_measured(
            costs, learner.batch_size, _buffer_size(learner),
            _experience_bytes(learner, obs_space, act_space), per_byte, rm_seconds)
    single = len(costs.devices) == 1
    plan = (SinglePartitioner(costs.devices[0]) if single else partitioner).partition(costs)
    if costs.dtypes is not None:
        plan.dtypes = [costs.dtypes[i][k] for i, k in enumerate(plan.assignment)]
    baselines = {} if single else {
        f"{d}_only": SinglePartitioner(d).partition(costs) for d in costs.devices}
    if costs.by_dtype is not None and len(costs.by_dtype) > 1 and "float32" in costs.by_dtype:
        fp32 = replace(costs, seconds=costs.by_dtype["float32"], dtypes=None, by_dtype=None)
        baselines["fp32"] = (SinglePartitioner(costs.devices[0]) if single
                             else partitioner).partition(fp32)
    return StepPlan(graph, costs, plan, baselines, measured=True, composition=composition)
