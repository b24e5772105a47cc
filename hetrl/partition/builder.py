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

A network that is not a chain (a residual tower with a policy and a value head) is described
part by part: each part is a forward of one of its submodules (`path`: where the submodule is
in the network, so node names and layers are the network's own), an output may feed several
parts (each head reads the tower), a backward may take the gradient from several parts, and
`residual` adds a skip connection (a block's input also goes to its last layer, which adds it;
in the backward that layer's gradient goes to the block's input too).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from math import prod

import torch
from torch import nn

from hetrl.partition.flops import ADAM, LOSS_FLOPS_PER_ELEMENT, Layer, OptimizerCost, kind_of
from hetrl.partition.graph import Edge, Kind, Node, Pass, TaskGraph

FLOAT_BYTES = 4
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

    def flat(self) -> Forward:
        """The same pass, its output seen flattened (a `flatten(1)` before a Linear)."""
        return replace(self, out_shape=(self.out_numel,))


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
    modes = {m: m.training for m in module.modules()}
    module.eval()  # a BatchNorm in training mode would fold the dummy batch into its statistics
    try:
        with torch.no_grad():
            out = module(*(torch.zeros(_DUMMY_BATCH, *shape, device=device) for shape in inputs))
    finally:
        for h in handles:
            h.remove()
        for m, training in modes.items():
            m.training = training
    return calls, tuple(out.shape[1:])


def mlp_input_shape(module: nn.Module) -> tuple[int, ...]:
    """The per-sample input shape of a network whose first layer is Linear."""
    first = next(m for m in module.modules() if isinstance(m, (nn.Linear, nn.Conv2d)))
    if not isinstance(first, nn.Linear):
        raise ValueError(f"the input shape of a network starting with {type(first).__name__} "
                         "is not in its layers; pass obs_shape explicitly")
    return (first.in_features,)


class StepGraph:
    """Accumulates the nodes and edges of one training step at a given batch size, whose
    updates are steps of `optimizer` (Adam unless given)."""

    def __init__(self, batch_size: int, optimizer: OptimizerCost = ADAM) -> None:
        self.batch_size = batch_size
        self.optimizer = optimizer
        self.graph = TaskGraph()
        self._passes: dict[tuple[str, str], int] = {}  # (network, path) -> forward passes so far
        self._updated: dict[int, int] = {}  # id(layer module) -> its update node
        self._backward_of: dict[int, int] = {}  # forward node -> its backward node
        # a forward node whose output a later layer adds (a skip connection) -> the backward
        # nodes of those layers, which send it their gradient
        self._skip_grads: dict[int, list[tuple[int, int]]] = defaultdict(list)
        self._skips: dict[int, int] = {}  # the layer that adds a skip -> the skip's source node

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

    def forward(self, network: str, module: nn.Module, *inputs: Input, path: str = "") -> Forward:
        """One forward pass of `module` on `inputs` (batch tensors or earlier passes' outputs);
        `module` is the network itself, or its submodule at `path` (a part of a network that
        is not one chain)."""
        shapes = [x.out_shape if isinstance(x, Forward) else x for x in inputs]
        layers, out_shape = profile(module, *shapes)
        if path:
            layers = [replace(layer, path=".".join(filter(None, (path, layer.path))))
                      for layer in layers]
        k = self._passes.get((network, path), 0)
        self._passes[network, path] = k + 1
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

    def residual(self, source: Forward, block: Forward) -> None:
        """`block` adds its input, the output of `source`, to what its last layer reads (a
        residual block's `relu(x + bn(conv(...)))`: the add is counted in that last layer)."""
        if block.out_shape != source.out_shape:
            raise ValueError(f"a skip from {source.network}/{source.layers[-1].path} "
                             f"{source.out_shape} cannot be added to the output of "
                             f"{block.network}/{block.layers[-1].path} {block.out_shape}")
        self._edge(source.nodes[-1], block.nodes[-1], self._bytes(source.out_numel))
        self._skips[block.nodes[-1]] = source.nodes[-1]

    def loss(self, name: str, *predictions: Forward) -> int:
        """A loss node that joins the forward passes it reads to the backward passes."""
        numel = sum(p.out_numel for p in predictions)
        i = self._node(name, name, "loss", Pass.forward, Kind.loss,
                       self.batch_size * LOSS_FLOPS_PER_ELEMENT * numel,
                       self._bytes(numel), self._bytes(numel), 0.0)
        for p in predictions:
            self._edge(p.nodes[-1], i, self._bytes(p.out_numel))
        return i

    def backward(self, fwd: Forward, upstream: int | tuple[int, ...], *,
                 input_grad: bool = False, weight_grads: bool = True) -> int:
        """Backward through `fwd`, fed the gradient of its output by node `upstream` (or by
        each of several nodes: an output that several parts read); returns the last backward
        node. `input_grad` asks for the gradient of the network's input (to go on into the
        network that produced it); `weight_grads=False` computes only that (a frozen network
        passing the gradient through)."""
        weight_positions = [j for j, layer in enumerate(fwd.layers) if layer.kind is Kind.matmul]
        first = 0 if input_grad else weight_positions[0]
        grads = (upstream,) if isinstance(upstream, int) else tuple(upstream)
        grad_numel = fwd.out_numel
        for j in range(len(fwd.layers) - 1, first - 1, -1):
            layer, computes_input_grad = fwd.layers[j], input_grad or j > first
            i = self._node(f"{fwd.network}/{layer.path}.backward{fwd.suffix}", fwd.network,
                           layer.path, Pass.backward, layer.kind,
                           self.batch_size * layer.backward_flops(computes_input_grad,
                                                                  weight_grads),
                           self._bytes(layer.out_numel + layer.in_numel),
                           self._bytes(layer.in_numel) if computes_input_grad else 0.0,
                           self._param_bytes(layer))
            for grad in grads:
                self._edge(grad, i, self._bytes(grad_numel))
            for grad, numel in self._skip_grads.pop(fwd.nodes[j], ()):  # added further on
                self._edge(grad, i, self._bytes(numel))
            if fwd.nodes[j] in self._skips:  # this layer added a skip: its source gets the grad
                self._skip_grads[self._skips[fwd.nodes[j]]].append((i, layer.out_numel))
            self._edge(fwd.nodes[j], i, self._bytes(layer.in_numel))
            self._backward_of[fwd.nodes[j]] = i
            grads, grad_numel = (i,), layer.in_numel
        return grads[0]

    def update(self, fwd: Forward) -> None:
        """An optimizer node per layer of `fwd` with parameters (weight layers, and a batch
        norm's scale and shift), after that layer's backward node."""
        moments = self.optimizer.moments
        for layer, fwd_node in zip(fwd.layers, fwd.nodes):
            if not layer.params:
                continue
            param_bytes = self._param_bytes(layer)
            i = self._node(f"{fwd.network}/{layer.path}.update{fwd.suffix}", fwd.network,
                           layer.path, Pass.update, Kind.optimizer,
                           layer.update_flops(self.optimizer),
                           (1 + moments) * param_bytes, moments * param_bytes, param_bytes)
            self._edge(self._backward_of[fwd_node], i, param_bytes)
            self._updated[id(layer.module)] = i
