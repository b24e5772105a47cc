"""Networks of one shape as one module, as LeanRL stacks its Q-networks: G MLPs whose every
Linear layer is one (G, out, in) weight and one (G, out) bias, network k's at index k, run as
one batched matmul on (G, ..., features) inputs, network k's on `x[k]`.

The parameters are stacked where they live, not at each call: an update's optimizer step,
gradient clip (by trainer: `clip_slices`) and target sync take one tensor a layer whatever G
is, so MADDPG's 24 agents trace, compile and run as its 3 do. Autograd gives slice k the
gradient of network k alone. Checked: tests/test_marl.py against G nn.Linear MLPs."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Hashable, Sequence

import torch
from torch import nn

from hetrl.algos.networks import mlp


NARROW = 8
"""Widest output a compiled StackedLinear computes as a multiply and sum, not a batched GEMM.
Measured here: MKL's batched GEMMs 2-8 columns wide (MADDPG's action and value heads, and
their backward) run at 1-7 GFLOP/s, while inductor fuses the multiply-sum into the kernels
around it. Compiled, such a layer's forward and backward on (3, 1024-3072, 64) inputs take
1.8-2.9x less time, and MADDPG-3's update 8-10 % less. Eager would materialize the product:
3.7x slower at 5 wide."""


class StackedLinear(nn.Module):
    """`copies` Linear layers of one shape: `F.linear(x[k], weight[k], bias[k])` for each k,
    as one `baddbmm` (a multiply-sum where compiled and at most `NARROW` wide); each slice
    drawn as nn.Linear draws its weight and bias."""

    def __init__(self, copies: int, in_features: int, out_features: int) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(copies, out_features, in_features))
        self.bias = nn.Parameter(torch.empty(copies, out_features))
        bound = 1.0 / math.sqrt(in_features)
        with torch.no_grad():
            for weight, bias in zip(self.weight, self.bias):
                nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
                nn.init.uniform_(bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(x.shape[0], -1, x.shape[-1])
        if self.out_features <= NARROW and torch.compiler.is_compiling():
            out = (rows.unsqueeze(2) * self.weight.unsqueeze(1)).sum(-1) + self.bias.unsqueeze(1)
        else:
            out = torch.baddbmm(self.bias.unsqueeze(1), rows, self.weight.transpose(1, 2))
        return out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"copies={self.weight.shape[0]}, in_features={self.in_features}, "
                f"out_features={self.out_features}")


def stacked_mlp(copies: int, sizes: list[int]) -> nn.Sequential:
    """`copies` MLPs of `mlp(sizes)`'s shape, stacked: (copies, ..., sizes[0]) inputs."""
    return mlp(sizes, layer=lambda n_in, n_out: StackedLinear(copies, n_in, n_out))


def slice_scales(grads: Sequence[torch.Tensor], max_norm: float) -> torch.Tensor:
    """The clip coefficient of each network of stacked `grads` (slice k of every tensor:
    network k's gradient), as `torch.nn.utils.clip_grad_norm_` would scale each network's
    alone; shape (G,)."""
    squares = torch.stack([g.pow(2).flatten(1).sum(1) for g in grads]).sum(0)
    return (max_norm / (squares.sqrt() + 1e-6)).clamp(max=1.0)


def per_slice(scales: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """`scales` (G,) shaped to multiply the G slices of a stacked `grad`."""
    return scales.view(-1, *(1,) * (grad.dim() - 1))


def by_shape(shapes: Sequence[Hashable]) -> list[list[int]]:
    """The indices of equal `shapes`, grouped (in order of first appearance)."""
    groups: dict[Hashable, list[int]] = defaultdict(list)
    for i, shape in enumerate(shapes):
        groups[shape].append(i)
    return list(groups.values())
