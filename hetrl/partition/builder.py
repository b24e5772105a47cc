"""Build the task graph of one training step from the real torch.nn modules.

A step is described pass by pass (`forward`, `loss`, `backward`, `update`); each network pass
runs the module once on a dummy batch under forward hooks, so layer sizes (Conv outputs
included) are the real ones, then emits one node per leaf-layer call. FLOPs follow
`hetrl.partition.flops`; bytes are float32 activations for the whole batch.

Edges: forward layer → next layer (its output); network output → consumer network or loss;
loss → last layer's backward (gradient of the output); backward → previous layer's backward
(gradient of its output); forward → its own backward (the saved input); backward → the layer's
update (the gradient); an update → any later forward of the same layer in the step (the
weights: DDPG's actor loss runs through the freshly updated critic).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import torch
from torch import nn

from hetrl.partition.flops import LOSS_FLOPS_PER_ELEMENT, Layer, kind_of
from hetrl.partition.graph import Edge, Kind, Node, Pass, TaskGraph

FLOAT_BYTES = 4
ADAM_MOMENTS = 2
_DUMMY_BATCH = 2  # not 1: a squeeze() in a forward must not drop the batch dimension


@dataclass(frozen=True)
class Forward:
    """One forward pass of a network in the graph: its layers and their node indices."""

    network: str
    suffix: str  # "" for a network's first pass, "#k" for its k-th repeat
    layers: tuple[Layer, ...]
    nodes: tuple[int, ...]
    out_shape: tuple[int, ...]  # per sample

    @property
    def out_numel(self) -> int:
        return prod(self.out_shape)


Input = tuple[int, ...] | Forward  # a batch tensor of this per-sample shape, or a network's output


def profile(module: nn.Module, *inputs: tuple[int, ...]) -> tuple[list[Layer], tuple[int, ...]]:
    """The leaf-layer calls of `module` on a dummy batch, in call order, and its output shape
    per sample."""
    calls: list[Layer] = []

    def record(path: str):
        def hook(mod: nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
            kind = kind_of(mod)
            if kind is not None:
                calls.append(Layer(path, mod, kind, args[0].numel() // _DUMMY_BATCH,
                                   out.numel() // _DUMMY_BATCH))
        return hook

    leaves = [(path, m) for path, m in module.named_modules() if not any(m.children())]
    handles = [m.register_forward_hook(record(path)) for path, m in leaves]
    device = next(module.parameters()).device
    try:
        with torch.no_grad():
            out = module(*(torch.zeros(_DUMMY_BATCH, *shape, device=device) for shape in inputs))
    finally:
        for h in handles:
            h.remove()
    return calls, tuple(out.shape[1:])


def mlp_input_shape(module: nn.Module) -> tuple[int, ...]:
    """The per-sample input shape of a network whose first layer is Linear."""
    first = next(m for m in module.modules() if isinstance(m, (nn.Linear, nn.Conv2d)))
    if not isinstance(first, nn.Linear):
        raise ValueError(f"the input shape of a network starting with {type(first).__name__} "
                         "is not in its layers; pass obs_shape explicitly")
    return (first.in_features,)


class StepGraph:
    """Accumulates the nodes and edges of one training step at a given batch size."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        self.graph = TaskGraph()
        self._passes: dict[str, int] = {}  # network -> forward passes so far
        self._updated: dict[int, int] = {}  # id(layer module) -> its update node
        self._backward_of: dict[int, int] = {}  # forward node -> its backward node

    def _bytes(self, numel: int) -> float:
        return float(self.batch_size * numel * FLOAT_BYTES)

    @staticmethod
    def _param_bytes(layer: Layer) -> float:
        return float(layer.params * FLOAT_BYTES)

    def _node(self, name: str, network: str, layer: str, pass_: Pass, kind: Kind, flops: float,
              bytes_in: float, bytes_out: float, param_bytes: float) -> int:
        self.graph.nodes.append(Node(name, network, layer, pass_, kind, float(flops),
                                     bytes_in, bytes_out, param_bytes))
        return len(self.graph.nodes) - 1

    def _edge(self, src: int, dst: int, bytes_: float) -> None:
        self.graph.edges.append(Edge(src, dst, bytes_))

    def forward(self, network: str, module: nn.Module, *inputs: Input) -> Forward:
        """One forward pass of `module` on `inputs` (batch tensors or earlier passes' outputs)."""
        shapes = [x.out_shape if isinstance(x, Forward) else x for x in inputs]
        layers, out_shape = profile(module, *shapes)
        k = self._passes.get(network, 0)
        self._passes[network] = k + 1
        suffix = f"#{k}" if k else ""
        nodes: list[int] = []
        for layer in layers:
            i = self._node(f"{network}/{layer.path}.forward{suffix}", network, layer.path,
                           Pass.forward, layer.kind, self.batch_size * layer.forward_flops(),
                           self._bytes(layer.in_numel), self._bytes(layer.out_numel),
                           self._param_bytes(layer))
            if nodes:
                self._edge(nodes[-1], i, self._bytes(layer.in_numel))
            if id(layer.module) in self._updated:
                self._edge(self._updated[id(layer.module)], i, self._param_bytes(layer))
            nodes.append(i)
        for x in inputs:
            if isinstance(x, Forward):
                self._edge(x.nodes[-1], nodes[0], self._bytes(x.out_numel))
        return Forward(network, suffix, tuple(layers), tuple(nodes), out_shape)

    def loss(self, name: str, *predictions: Forward) -> int:
        """A loss node that joins the forward passes it reads to the backward passes."""
        numel = sum(p.out_numel for p in predictions)
        i = self._node(name, name, "loss", Pass.forward, Kind.loss,
                       self.batch_size * LOSS_FLOPS_PER_ELEMENT * numel,
                       self._bytes(numel), self._bytes(numel), 0.0)
        for p in predictions:
            self._edge(p.nodes[-1], i, self._bytes(p.out_numel))
        return i

    def backward(self, fwd: Forward, upstream: int, *, input_grad: bool = False) -> int:
        """Backward through `fwd`, fed the gradient of its output by node `upstream`; returns
        the last backward node. `input_grad` asks for the gradient of the network's input
        (to go on into the network that produced it)."""
        weight_positions = [j for j, layer in enumerate(fwd.layers) if layer.kind is Kind.matmul]
        first = 0 if input_grad else weight_positions[0]
        grad_from, grad_numel = upstream, fwd.out_numel
        for j in range(len(fwd.layers) - 1, first - 1, -1):
            layer, computes_input_grad = fwd.layers[j], input_grad or j > first
            i = self._node(f"{fwd.network}/{layer.path}.backward{fwd.suffix}", fwd.network,
                           layer.path, Pass.backward, layer.kind,
                           self.batch_size * layer.backward_flops(computes_input_grad),
                           self._bytes(layer.out_numel + layer.in_numel),
                           self._bytes(layer.in_numel) if computes_input_grad else 0.0,
                           self._param_bytes(layer))
            self._edge(grad_from, i, self._bytes(grad_numel))
            self._edge(fwd.nodes[j], i, self._bytes(layer.in_numel))
            self._backward_of[fwd.nodes[j]] = i
            grad_from, grad_numel = i, layer.in_numel
        return grad_from

    def update(self, fwd: Forward) -> None:
        """An optimizer node per weight layer of `fwd`, after that layer's backward node."""
        for layer, fwd_node in zip(fwd.layers, fwd.nodes):
            if layer.kind is not Kind.matmul:
                continue
            param_bytes = self._param_bytes(layer)
            i = self._node(f"{fwd.network}/{layer.path}.update{fwd.suffix}", fwd.network,
                           layer.path, Pass.update, Kind.optimizer, layer.update_flops(),
                           (1 + ADAM_MOMENTS) * param_bytes, ADAM_MOMENTS * param_bytes,
                           param_bytes)
            self._edge(self._backward_of[fwd_node], i, param_bytes)
            self._updated[id(layer.module)] = i
