"""Per-layer numerics: each layer of a network computes in its own dtype.

A layer assigned float16 or bfloat16 computes in that dtype (`hetrl.precision.native`: under
autocast, or rounded where the device would only emulate the dtype), so its matmuls use 16-bit
inputs and weights while the fp32 parameters stay the master copy that the optimizer updates
(AP-DRL's PL nodes: FP16 compute, FP32 master weights). Float32 layers cast what they
receive back to float32: that is the conversion at a device boundary. The network's output
is float32, so losses are computed in full precision.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import torch
from torch import nn

from hetrl.precision.native import context_of


def compute_layers_in(network: nn.Module, dtypes: Mapping[str, torch.dtype]) -> None:
    """Make `network`'s submodule `name` compute in `dtypes[name]` (the network as a whole
    where all its leaf layers share one dtype), its output in float32: each such module's
    `forward` becomes a `PlannedForward`, which a compiled update traces (a forward hook
    pair cannot hold a context open between its two calls)."""
    device_type = next(network.parameters()).device.type
    leaves = {name for name, m in network.named_modules() if not any(m.children())}
    if len(set(dtypes.values())) == 1 and leaves <= dtypes.keys():
        # one dtype throughout: one context around the network (a region per layer costs
        # a call each, and each of its casts back to float32 one more)
        dtypes = {"": next(iter(dtypes.values()))}
    for name, layer in network.named_modules():
        if name in dtypes or layer is network:
            layer.forward = PlannedForward(layer, device_type, dtypes.get(name),
                                           float_outputs=layer is network)


class PlannedForward:
    """A module's forward in its planned dtype, set as the module's `forward`: float32 casts
    what it receives to float32 (the conversion at a device boundary), a 16-bit dtype computes
    inside `compute_in`'s context (chosen when made, entered and left within the call, so a
    graph traces it); `float_outputs`: the network's outputs (each of several, as a
    policy/value network's) in float32, so losses are computed in full precision. The
    module's state dict keeps its keys, and it pickles whole (an actor pool's copy)."""

    def __init__(self, module: nn.Module, device_type: str, dtype: torch.dtype | None,
                 float_outputs: bool) -> None:
        self.module, self.dtype, self.float_outputs = module, dtype, float_outputs
        self.context = (None if dtype in (None, torch.float32)
                        else context_of(device_type, dtype))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        forward = type(self.module).forward
        if self.dtype == torch.float32:
            args = tuple(a.float() if torch.is_tensor(a) else a for a in args)
        if self.context is None:
            output = forward(self.module, *args, **kwargs)
        else:
            with self.context():
                output = forward(self.module, *args, **kwargs)
        if not self.float_outputs:
            return output
        if isinstance(output, tuple):
            return tuple(o.float() if torch.is_tensor(o) else o for o in output)
        return output.float()


class RoundToBfloat16:
    """An optimizer step post-hook that rounds `params` to bfloat16 (picklable); `out_of_place`
    is its rule on one new value, which a compiled update applies to those parameters after
    the optimizer's arithmetic."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.params = params

    def __call__(self, optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        round_to_bfloat16(self.params)

    @staticmethod
    def out_of_place(p: torch.Tensor) -> torch.Tensor:
        return p.to(torch.bfloat16).to(p.dtype)


@torch.no_grad()
def round_to_bfloat16(params: Iterable[torch.Tensor]) -> None:
    """Round weights to the nearest bfloat16 (ties to even), in place: AP-DRL's AIE nodes keep
    bf16 weights with no master copy, emulated as an fp32 optimizer step then rounding."""
    for p in params:
        p.copy_(p.to(torch.bfloat16))
