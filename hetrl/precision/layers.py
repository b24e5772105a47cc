"""Per-layer numerics: each layer of a network computes in its own dtype.

A layer assigned float16 or bfloat16 runs under autocast to that dtype, so its matmuls use
16-bit inputs and weights while the fp32 parameters stay the master copy that the optimizer
updates (AP-DRL's PL nodes: FP16 compute, FP32 master weights). Float32 layers cast what they
receive back to float32: that is the conversion at a device boundary. The network's output
is float32, so losses are computed in full precision.
"""

from __future__ import annotations

from typing import Iterable, Mapping

import torch
from torch import nn


def compute_layers_in(network: nn.Module, dtypes: Mapping[str, torch.dtype]) -> None:
    """Install hooks so that `network`'s submodule `name` computes in `dtypes[name]`."""
    device_type = next(network.parameters()).device.type
    for name, layer in network.named_modules():
        dtype = dtypes.get(name)
        if dtype is None:
            continue
        if dtype == torch.float32:
            layer.register_forward_pre_hook(_cast_inputs_to_float32)
        else:
            _autocast_layer(layer, torch.autocast(device_type, dtype=dtype))
    network.register_forward_hook(lambda module, args, output: output.float())


def _cast_inputs_to_float32(module: nn.Module, args: tuple) -> tuple:
    return tuple(a.float() if torch.is_tensor(a) else a for a in args)


def _autocast_layer(layer: nn.Module, context: torch.autocast) -> None:
    def enter(module: nn.Module, args: tuple) -> None:
        context.__enter__()

    def leave(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
        context.__exit__(None, None, None)

    layer.register_forward_pre_hook(enter)
    layer.register_forward_hook(leave)


@torch.no_grad()
def round_to_bfloat16(params: Iterable[torch.Tensor]) -> None:
    """Round weights to the nearest bfloat16 (ties to even), in place: AP-DRL's AIE nodes keep
    bf16 weights with no master copy, emulated as an fp32 optimizer step then rounding."""
    for p in params:
        p.copy_(p.to(torch.bfloat16))
