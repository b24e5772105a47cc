"""Networks of one shape run as one call, as LeanRL runs its Q-networks: their parameters
stacked along a new first dimension and one template network mapped over the stack by
`torch.func.vmap`. The networks stay the learner's own modules (what checkpoints, targets,
actors and optimizers hold); the stack is made from their parameters at each call, so
autograd takes each network's gradient to its own parameters, and the compiled update
(which calls the learner on its functional tensors) stacks those."""

from __future__ import annotations

import copy
from collections import defaultdict
from typing import Hashable, Sequence

import torch
from torch import nn
from torch.func import vmap

from hetrl.algos.placement import held, parameters, place, slots, submodules


class Ensemble:
    """Runs networks shaped as `template` as one vmapped call (the template's own weights are
    never used: it is kept on the meta device)."""

    def __init__(self, template: nn.Module) -> None:
        self.template = copy.deepcopy(template).to("meta")
        self.slots = slots(self.template, buffers=False)
        self.own = held(self.slots)

    def __call__(self, networks: Sequence[nn.Module], x: torch.Tensor) -> torch.Tensor:
        """Network k on `x[k]`: (G, ...) inputs for G networks, stacked outputs. Networks
        with forward hooks or parametrizations (QAT's fake quantization, which observes and
        rewrites their weights) run one by one, as their hooks need."""
        walks = [submodules(net) for net in networks]
        if any(hooked(m) for walk in walks for m in walk):
            return torch.stack([net(x[k]) for k, net in enumerate(networks)])
        stacked = [torch.stack(layer) for layer in zip(*(parameters(walk) for walk in walks))]
        return vmap(self._one)(x, *stacked)  # flat: vmap's pytree walks are traced too

    def _one(self, x: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        place(self.slots, params)
        try:
            return self.template(x)
        finally:
            place(self.slots, self.own)


def hooked(module: nn.Module) -> bool:
    """Whether `module` itself has forward hooks or parametrizations: what a functional call
    over its parameters (vmap, one compiled graph) would skip."""
    return bool(module._forward_hooks or module._forward_pre_hooks
                or hasattr(module, "parametrizations"))


def by_shape(shapes: Sequence[Hashable]) -> list[list[int]]:
    """The indices of equal `shapes`, grouped (in order of first appearance)."""
    groups: dict[Hashable, list[int]] = defaultdict(list)
    for i, shape in enumerate(shapes):
        groups[shape].append(i)
    return list(groups.values())
