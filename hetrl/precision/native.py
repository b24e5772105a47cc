"""Computing in a 16-bit dtype on the device at hand: natively under torch autocast where the
device has instructions for the dtype, else emulated by rounding.

A CPU without instructions for a dtype emulates it under autocast too, but slowly: on this
project's AVX-512 host (bf16 instructions, no fp16 ones) an fp16-autocast DDPG [400,300] update
takes ~10x an fp32 one (`../shared/STACK.md`, issue 15). `RoundedCompute` computes the same
numbers several times faster (that update: 1.3x fp32's time, `benchmarks/precision_speed.py`):
each matmul and convolution takes its operands rounded to the dtype, computes in float32
(16-bit hardware accumulates in fp32 too) and rounds its result.
The casts' gradients round the backward pass alike, as autocast's do: the gradient reaching a
rounded output, and each gradient leaving a rounded operand, lies on the dtype's grid, and an
fp16 overflow is an inf that loss scaling sees. Only the rounding of element-wise ops (ReLU,
tanh) on 16-bit outputs differs: they compute in float32 on values that are on the grid.
"""

from __future__ import annotations

import functools
from contextlib import AbstractContextManager
from typing import Callable

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

CPU_NATIVE_FLAGS = {"bfloat16": ("avx512_bf16", "amx_bf16"), "float16": ("avx512_fp16", "amx_fp16")}
"""The /proc/cpuinfo flags of x86 instructions that compute in each 16-bit dtype."""

REDUCED_OPS = frozenset({F.linear, F.conv1d, F.conv2d, F.conv3d, torch.matmul, torch.mm,
                         torch.bmm, torch.addmm, torch.Tensor.matmul, torch.Tensor.__matmul__})
"""The ops that compute in the reduced dtype (those of autocast's lower-precision list that a
network's layers call)."""


@functools.cache
def cpu_native(dtype: str) -> bool | None:
    """Whether this CPU has instructions for `dtype` (None: cannot tell, not Linux x86)."""
    try:
        flags = set(open("/proc/cpuinfo").read().split())
    except OSError:
        return None
    return any(flag in flags for flag in CPU_NATIVE_FLAGS.get(dtype, ()))


def emulates(device_type: str, dtype: torch.dtype) -> bool:
    """Whether a `device_type` device lacks instructions for `dtype` (a CPU that says so)."""
    return (device_type == "cpu" and dtype != torch.float32
            and cpu_native(str(dtype).removeprefix("torch.")) is False)


def compute_in(device_type: str, dtype: torch.dtype) -> AbstractContextManager:
    """The context in which matmuls and convolutions compute in `dtype` (see `context_of`)."""
    return context_of(device_type, dtype)()


def context_of(device_type: str, dtype: torch.dtype) -> Callable[[], AbstractContextManager]:
    """What makes the context in which matmuls and convolutions compute in `dtype` (weights
    stay float32): autocast where the device has instructions for it, `RoundedCompute` where
    it would only emulate them. Chosen once (a compiled graph that makes the context traces
    no look at the CPU's flags); each call makes a fresh context (picklable).

    Autocast's cache of weight casts is off: it keys a cast on the weight's storage, not its
    version, so a weight stepped inside the context would be read as it was before the step.
    Torch asks for autocast around forward passes only; an update steps its optimizers inside
    it (DDPG's, TD3's and D4PG's actor loss reads the critic stepped just before)."""
    if emulates(device_type, dtype):
        return functools.partial(RoundedCompute, dtype)
    return functools.partial(torch.autocast, device_type, dtype=dtype, cache_enabled=False)


class RoundedCompute(TorchFunctionMode):
    """`dtype`'s numerics computed in float32 (see the module docstring)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype

    def _round(self, value: object) -> object:
        if torch.is_tensor(value) and value.is_floating_point():
            return value.to(self.dtype).to(torch.float32)
        return value

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in REDUCED_OPS:
            return func(*args, **kwargs)
        args = tuple(self._round(a) for a in args)
        kwargs = {k: self._round(v) for k, v in kwargs.items()}
        return self._round(func(*args, **kwargs))
