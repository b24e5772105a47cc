"""FLOPs of one layer pass, and FLOP totals of a task graph (AP-DRL spec §A.6).

Convention, per sample (MAC = multiply-accumulates of the layer's weights):

- weight layer (Linear, Conv2d; Kind.matmul) forward: 2·MAC + one add per bias output;
- weight layer backward: the weight gradient (2·MAC + bias) plus the input gradient (2·MAC),
  except for a network's first weight layer, whose input gradient nobody needs (unless the
  gradient flows on into another network, as DDPG's critic passes it to the actor);
- activation (ReLU, Tanh; Kind.elementwise): one FLOP per element, forward and backward;
- batch normalization (BatchNorm1d/2d in training mode; Kind.elementwise, with a weight
  update for its scale and shift): NORM_FORWARD_FLOPS_PER_ELEMENT forward (the batch's mean
  and variance, normalize, scale and shift), NORM_BACKWARD_FLOPS_PER_ELEMENT backward (the
  scale and shift gradients, and the input gradient through the batch statistics);
- loss (Kind.loss): LOSS_FLOPS_PER_ELEMENT per predicted element;
- optimizer update (Kind.optimizer): the optimizer's FLOPs per parameter (`ADAM`: 12;
  `SGD_MOMENTUM`: 4), once per step, whatever the batch size.

The paper's Table III / Fig. 8 count only the weight-layer passes: its graph has no activation,
loss or update nodes. `PAPER_KINDS` reproduces that count (DQN-Breakout: 15 nodes, 68.27 M per
sample vs the paper's 68.17 M), while the graph keeps the other nodes for the partitioner.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from math import prod

from torch import nn

from hetrl.partition.graph import Kind, TaskGraph

WEIGHT_LAYERS = (nn.Linear, nn.Conv2d)
ACTIVATIONS = (nn.ReLU, nn.Tanh)
NORMS = (nn.BatchNorm1d, nn.BatchNorm2d)


class NoNode(nn.Module):
    """A module the task graph draws no node for, as the paper draws none for a reshape: a
    network's input scaling (`hetrl.algos.networks.ScaleImage`) derives from it."""


VIEWS = (nn.Flatten, nn.Identity, NoNode)  # reshape or input scaling: no node (as the paper)
LOSS_FLOPS_PER_ELEMENT = 3  # difference, square (or Huber branch), reduction
# mean and variance (a sum, a square and a sum), normalize (subtract, multiply by the inverse
# standard deviation), scale and shift (multiply, add)
NORM_FORWARD_FLOPS_PER_ELEMENT = 7
# shift and scale gradients (a sum; a multiply and a sum), the input gradient (the two batch
# reductions it needs, and five element-wise terms)
NORM_BACKWARD_FLOPS_PER_ELEMENT = 10


@dataclass(frozen=True)
class OptimizerCost:
    """What one optimizer step does per parameter: FLOPs, and the state tensors of the
    parameter's size it reads and writes besides the parameter and its gradient."""

    flops_per_param: int
    moments: int


ADAM = OptimizerCost(12, 2)  # two moment updates, sqrt, eps, divide, scaled step
SGD_MOMENTUM = OptimizerCost(4, 1)  # buf = momentum * buf + grad; param -= lr * buf
PAPER_KINDS = frozenset({Kind.matmul})


def kind_of(module: nn.Module) -> Kind | None:
    """The node kind of a leaf module; None for pure reshapes, which get no node."""
    if isinstance(module, WEIGHT_LAYERS):
        return Kind.matmul
    if isinstance(module, (*ACTIVATIONS, *NORMS)):
        return Kind.elementwise
    if isinstance(module, VIEWS):
        return None
    supported = ", ".join(t.__name__ for t in (*WEIGHT_LAYERS, *ACTIVATIONS, *NORMS, *VIEWS))
    raise TypeError(f"no FLOP rule for layer {type(module).__name__}; supported: {supported}")


@dataclass(frozen=True)
class Layer:
    """One call of a leaf module, with its sizes per sample as a real forward pass saw them."""

    path: str  # the module's path inside its network
    module: nn.Module
    kind: Kind
    in_numel: int
    out_numel: int

    @property
    def macs(self) -> int:
        m = self.module
        if isinstance(m, nn.Linear):
            return self.out_numel * m.in_features
        if isinstance(m, nn.Conv2d):
            return self.out_numel * (m.in_channels // m.groups) * prod(m.kernel_size)
        return 0

    @property
    def params(self) -> int:
        return sum(p.numel() for p in self.module.parameters(recurse=False))

    def _bias_adds(self) -> int:
        return self.out_numel if getattr(self.module, "bias", None) is not None else 0

    def forward_flops(self) -> int:
        if self.kind is Kind.matmul:
            return 2 * self.macs + self._bias_adds()
        if isinstance(self.module, NORMS):
            return NORM_FORWARD_FLOPS_PER_ELEMENT * self.out_numel
        return self.out_numel

    def backward_flops(self, input_grad: bool, weight_grads: bool = True) -> int:
        if self.kind is Kind.matmul:
            return ((2 * self.macs + self._bias_adds() if weight_grads else 0)
                    + (2 * self.macs if input_grad else 0))
        if isinstance(self.module, NORMS):
            return NORM_BACKWARD_FLOPS_PER_ELEMENT * self.out_numel
        return self.out_numel

    def update_flops(self, optimizer: OptimizerCost = ADAM) -> int:
        return optimizer.flops_per_param * self.params


def total_flops(graph: TaskGraph, kinds: Collection[Kind] = tuple(Kind)) -> float:
    """FLOPs of one whole step (all of the batch) over the nodes of the given kinds."""
    return sum(node.flops for node in graph.nodes if node.kind in kinds)


def per_sample_flops(graph: TaskGraph, batch_size: int,
                     kinds: Collection[Kind] = tuple(Kind)) -> float:
    """Table III's "Train FLOPs (per batch size)": the step's FLOPs / batch size. Update nodes,
    if counted, are amortized over the batch."""
    return total_flops(graph, kinds) / batch_size
