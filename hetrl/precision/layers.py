"""Per-layer numerics: each layer of a network computes in its own dtype.

A layer assigned float16 or bfloat16 computes in that dtype (`hetrl.precision.native`: under
autocast, or rounded where the device would only emulate the dtype), so its matmuls use 16-bit
inputs and weights while the fp32 parameters stay the master copy that the optimizer updates
(AP-DRL's PL nodes: FP16 compute, FP32 master weights). Float32 layers cast what they
receive back to float32: that is the conversion at a device boundary. The network's output
is float32, so losses are computed in full precision.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Iterable, Mapping

import torch
from torch import nn

from hetrl.precision.native import compute_in


def compute_layers_in(network: nn.Module, dtypes: Mapping[str, torch.dtype]) -> None:
    """Install hooks so that `network`'s submodule `name` computes in `dtypes[name]` (the
    network as a whole where all its leaf layers share one dtype). The hooks are
    module-level functions and picklable objects, so the network still pickles whole (an
    actor pool's processes get a copy of the learner)."""
    device_type = next(network.parameters()).device.type
    leaves = {name for name, m in network.named_modules() if not any(m.children())}
    if len(set(dtypes.values())) == 1 and leaves <= dtypes.keys():
        # one dtype throughout: one context around the network (a region per layer costs
        # a hook pair each, and each of its casts back to float32 one more)
        dtypes = {"": next(iter(dtypes.values()))}
    for name, layer in network.named_modules():
        dtype = dtypes.get(name)
        if dtype is None:
            continue
        if dtype == torch.float32:
            layer.register_forward_pre_hook(_cast_inputs_to_float32)
        else:
            compute = LayerCompute(device_type, dtype)
            layer.register_forward_pre_hook(compute.enter)
            layer.register_forward_hook(compute.leave)
    network.register_forward_hook(_output_to_float32)


def _cast_inputs_to_float32(module: nn.Module, args: tuple) -> tuple:
    return tuple(a.float() if torch.is_tensor(a) else a for a in args)


def _output_to_float32(module: nn.Module, args: tuple,
                       output: torch.Tensor | tuple) -> torch.Tensor | tuple:
    """The network's output in float32 (each of several, as a policy/value network's)."""
    if isinstance(output, tuple):
        return tuple(o.float() if torch.is_tensor(o) else o for o in output)
    return output.float()


class LayerCompute:
    """One layer's context computing in `dtype`: entered by its forward pre-hook, left by its
    forward hook. Pickles as its device type and dtype (a live context does not)."""

    def __init__(self, device_type: str, dtype: torch.dtype) -> None:
        self.device_type, self.dtype = device_type, dtype
        self.context: AbstractContextManager | None = None

    def enter(self, module: nn.Module, args: tuple) -> None:
        self.context = compute_in(self.device_type, self.dtype)
        self.context.__enter__()

    def leave(self, module: nn.Module, args: tuple, output: torch.Tensor) -> None:
        if self.context is not None:
            self.context.__exit__(None, None, None)
            self.context = None

    def __getstate__(self) -> dict:
        return {"device_type": self.device_type, "dtype": self.dtype, "context": None}


class RoundToBfloat16:
    """An optimizer step post-hook that rounds `params` to bfloat16 (picklable)."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.params = params

    def __call__(self, optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        round_to_bfloat16(self.params)


@torch.no_grad()
def round_to_bfloat16(params: Iterable[torch.Tensor]) -> None:
    """Round weights to the nearest bfloat16 (ties to even), in place: AP-DRL's AIE nodes keep
    bf16 weights with no master copy, emulated as an fp32 optimizer step then rounding."""
    for p in params:
        p.copy_(p.to(torch.bfloat16))
