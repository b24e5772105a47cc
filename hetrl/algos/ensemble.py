"""Networks of one shape run as one call, as LeanRL runs its Q-networks: each Linear layer of
G networks is one batched matmul of their weights, stacked along a new first dimension at
the call. The networks stay the learner's own modules (what checkpoints, targets, actors and
optimizers hold), so autograd takes each network's gradient to its own parameters, and the
compiled update (which places its functional tensors in those modules) stacks those.

A batched matmul rather than `torch.func.vmap` of one network: the same kernels, without
vmap's wrapping and pytree walks of every argument, which eager pays at each call and
dynamo traces bytecode by bytecode (a quarter of MADDPG's update trace)."""

from __future__ import annotations

from collections import defaultdict
from typing import Hashable, Sequence

import torch
from torch import nn


def ensemble(networks: Sequence[nn.Sequential], x: torch.Tensor) -> torch.Tensor:
    """Network k on `x[k]`: (G, ..., features) inputs for G networks of one shape (Linear
    layers and parameter-free ones between them, as `mlp` makes them, and alike in their
    hooks), stacked outputs. Networks with forward hooks or parametrizations (QAT's fake
    quantization, which observes and rewrites their weights) run one by one, as their hooks
    need."""
    layers = [list(net._modules.values()) for net in networks]
    # the first network's hooks say: a precision (QAT) hooks every network of a learner
    if any(hooked(m) for m in (networks[0], *layers[0])):
        return torch.stack([net(x[k]) for k, net in enumerate(networks)])
    for same in zip(*layers):
        if isinstance(same[0], nn.Linear):
            x = _linear(x, [m._parameters["weight"] for m in same],
                        [m._parameters["bias"] for m in same])
        elif same[0]._parameters or same[0]._modules:
            raise TypeError(f"an ensemble runs Linear layers and parameter-free ones, not "
                            f"{type(same[0]).__name__}")
        else:
            x = same[0](x)
    return x


def _linear(x: torch.Tensor, weights: list[torch.Tensor],
            biases: list[torch.Tensor | None]) -> torch.Tensor:
    """`F.linear(x[k], weights[k], biases[k])` for every k, as one batched matmul."""
    rows = x.reshape(x.shape[0], -1, x.shape[-1])
    w = torch.stack(weights).transpose(1, 2)
    out = (torch.bmm(rows, w) if biases[0] is None
           else torch.baddbmm(torch.stack(biases).unsqueeze(1), rows, w))
    return out.reshape(*x.shape[:-1], w.shape[-1])


def hooked(module: nn.Module) -> bool:
    """Whether `module` itself has forward hooks or parametrizations: what a functional call
    over its parameters (a stacked matmul, one compiled graph) would skip."""
    return bool(module._forward_hooks or module._forward_pre_hooks
                or hasattr(module, "parametrizations"))


def by_shape(shapes: Sequence[Hashable]) -> list[list[int]]:
    """The indices of equal `shapes`, grouped (in order of first appearance)."""
    groups: dict[Hashable, list[int]] = defaultdict(list)
    for i, shape in enumerate(shapes):
        groups[shape].append(i)
    return list(groups.values())
