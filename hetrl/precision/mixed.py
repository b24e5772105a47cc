"""AP-DRL's hardware-aware mixed precision: every layer computes in the dtype of the device its
plan assigns it (PS fp32; PL fp16 on fp32 master weights with dynamic loss scaling; AIE bf16).
On the host (no modeled devices) the plan's dtypes are measured: each layer computes in the
dtype of `prefer` (or float32) whose passes of it measured fastest on the host's device, where
that beats float32 by `min_speedup` (`hetrl.platform.host.per_layer_dtypes`).

What is emulated, and how (specs/ap-drl-pearl.md §A.2.6, D.1 #9-#10):
- a layer's forward and backward run in the dtype of its (first) forward node's device;
- fp16 layers keep fp32 master weights; one dynamic loss scale covers the whole step, and an
  fp16 overflow skips the whole step;
- bf16 layers keep no master copy: after each optimizer step (computed in fp32, optimizer state
  in fp32) their weights are rounded to bf16, round-to-nearest-even.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import Callable

import torch

from hetrl.algos.base import Learner
from hetrl.config.enums import DType
from hetrl.config.errors import ConfigError
from hetrl.partition.costs import Plan
from hetrl.partition.graph import Kind, Node, Pass, TaskGraph
from hetrl.precision.base import PrecisionNeeds
from hetrl.precision.layers import RoundToBfloat16, compute_layers_in
from hetrl.precision.scaling import LossScaling


class HardwareAwarePrecision:
    needs = PrecisionNeeds(plan=True)

    def __init__(self, prefer: list[str], loss_scaling: LossScaling, min_speedup: float) -> None:
        self.prefer = [DType(d) for d in prefer]
        self.loss_scaling = loss_scaling
        self.min_speedup = min_speedup

    @property
    def host_dtypes(self) -> tuple[str, ...]:
        """The dtypes the host measures each layer pass in: float32 and those preferred."""
        return tuple(dict.fromkeys(["float32", *(d.value for d in self.prefer)]))

    def dtype_chooser(self, platform) -> Callable[[Node, str], str]:
        """Each device's dtype: the first preferred one it supports natively."""
        chosen = {}
        for name, spec in platform.specs.items():
            native = [DType(d) for d in spec.native]
            chosen[name] = next((d.value for d in self.prefer if d in native), native[0].value)
        return lambda node, device: chosen[device]

    def apply(self, learner: Learner, graph: TaskGraph | None, plan: Plan | None,
              platform) -> None:
        if plan is None:
            raise ConfigError(
                "precision=mixed needs a plan: choose a modeled platform (e.g. platform=versal) "
                "or platform=host with platform.measure_layers=true, so that each layer is "
                "assigned a device and a dtype"
            )
        nodes = self.node_dtypes(graph, plan, platform)
        forward = layer_forward_dtypes(nodes)
        rounded = [p for node, dtype in nodes if node.pass_ is Pass.update
                   and dtype == torch.bfloat16
                   for p in getattr(learner, node.network).get_submodule(node.layer).parameters()]
        for network, layers in forward.items():
            # a network all in float32 gets no hooks: the same numbers, without their cost
            # (a small update on the host is dominated by such overheads)
            if any(dtype != torch.float32 for dtype in layers.values()):
                compute_layers_in(getattr(learner, network), layers)
        if rounded:
            for optimizer in learner.optimizers().values():
                owned = {id(p) for group in optimizer.param_groups for p in group["params"]}
                mine = [p for p in rounded if id(p) in owned]
                if mine:
                    optimizer.register_step_post_hook(RoundToBfloat16(mine))
        if any(torch.float16 in layers.values() for layers in forward.values()):
            learner.scaler = self.loss_scaling.scaler(learner.device)

    def node_dtypes(self, graph: TaskGraph, plan: Plan,
                    platform) -> list[tuple[Node, torch.dtype]]:
        """Each node of the step but the loss (computed by the update rule, in fp32) with the
        dtype it computes in: the plan's own where the host measured them, else its device's."""
        if plan.dtypes is not None:  # measured on the host: the plan's own dtypes
            dtypes = plan.dtypes
        else:
            dtype_of = self.dtype_chooser(platform)
            dtypes = [dtype_of(node, plan.devices[k])
                      for node, k in zip(graph.nodes, plan.assignment)]
        return [(node, getattr(torch, name)) for node, name in zip(graph.nodes, dtypes)
                if node.kind is not Kind.loss]

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager:
        """No step-wide autocast: each layer has its own (see `apply`)."""
        return contextlib.nullcontext()


def layer_forward_dtypes(nodes: list[tuple[Node, torch.dtype]]
                         ) -> dict[str, dict[str, torch.dtype]]:
    """network -> layer -> the dtype the layer computes in: its first forward node's (a layer
    run twice in a step keeps its first dtype)."""
    forward: dict[str, dict[str, torch.dtype]] = defaultdict(dict)
    for node, dtype in nodes:
        if node.pass_ is Pass.forward:
            forward[node.network].setdefault(node.layer, dtype)
    return forward
