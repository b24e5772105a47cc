"""The one adapter to PyTorch's quantized kernels (`torch.ao`, deprecated in favour of torchao):
moving to another backend is a change here only.

Int8 layers are dynamically quantized: weights are stored as symmetric int8 (per tensor, or
per output channel for convolutions), each input is quantized per tensor on the fly (7 bits
on x86/fbgemm, `reduce_range`, which keeps the int16 intermediate sums from saturating), the
product accumulates in int32 and comes back as float32. A convolution is that int8 GEMM on
the unfolded input patches (im2col): torch.ao's own dynamic conv requantizes its output and
lost an order of magnitude more accuracy. Float16 Linear layers keep fp16 weights and run
fbgemm's fp16 GEMM. (Measured on the 2-core dev box, batch 1, one 2048x2048 layer, 1 thread:
fp32 0.48 ms, this int8 Linear 0.08 ms, `torch._int_mm` 0.21 ms before any (de)quantization,
fp16 GEMM 0.15 ms, `.half()` Linear 0.31 ms: hence these choices.)
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Iterator

import torch
import torch.ao.nn.quantized.dynamic as nnqd
import torch.nn.functional as F
from torch import nn

from hetrl.quant.quantizers import affine_params


@contextmanager
def _quiet() -> Iterator[None]:
    """torch.ao's deprecation notices (they point to torchao) on every quantized tensor."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*quantiz.*deprecated.*")
        yield


def _engine() -> None:
    """QNNPACK has no fp16 path and is slower on x86: prefer x86, then fbgemm."""
    for engine in ("x86", "fbgemm"):
        if engine in torch.backends.quantized.supported_engines:
            torch.backends.quantized.engine = engine
            return


def qint8_weight(weight: torch.Tensor, per_channel: bool) -> torch.Tensor:
    w = weight.detach().float().cpu()
    scale, zero_point = affine_params(w, bits=8, per_channel=per_channel, symmetric=True)
    if per_channel:
        return torch.quantize_per_channel(w, scale.flatten().double(),
                                          zero_point.flatten().long(), 0, torch.qint8)
    return torch.quantize_per_tensor(w, float(scale), 0, torch.qint8)


def _bias(layer: nn.Module) -> torch.Tensor | None:
    return None if layer.bias is None else layer.bias.detach().float().cpu()


def _gemm(layer: nn.Module, dtype: torch.dtype) -> nnqd.Linear:
    """An fbgemm GEMM (torch.ao's dynamic quantized Linear) shaped for `layer`'s weight as
    a matrix; its weights are packed by a `load`."""
    _engine()
    out_features, in_features = layer.weight.shape[0], layer.weight[0].numel()
    with _quiet():
        return nnqd.Linear(in_features, out_features, bias_=layer.bias is not None, dtype=dtype)


class Int8Linear(nn.Module):
    """A real int8 Linear (per-tensor symmetric weights, dynamic per-tensor inputs)."""

    def __init__(self, layer: nn.Linear) -> None:
        super().__init__()
        self.gemm = _gemm(layer, torch.qint8)
        self.load(layer)

    def load(self, layer: nn.Linear) -> None:
        """Quantize and pack `layer`'s current weights (in place: a pull's repack)."""
        with _quiet():
            self.gemm.set_weight_bias(qint8_weight(layer.weight, False), _bias(layer))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gemm(x)


class Int8Conv2d(nn.Module):
    """A Conv2d as an int8 GEMM on its unfolded input patches (groups = 1, zero padding)."""

    def __init__(self, layer: nn.Conv2d, per_channel: bool) -> None:
        super().__init__()
        if layer.groups != 1 or layer.padding_mode != "zeros" or isinstance(layer.padding, str):
            raise ValueError(f"int8 kernels take Conv2d with groups=1, numeric zero padding: "
                             f"got groups={layer.groups}, padding={layer.padding!r}, "
                             f"padding_mode={layer.padding_mode!r}")
        self.per_channel = per_channel
        self.gemm = _gemm(layer, torch.qint8)
        self.kernel_size, self.stride = layer.kernel_size, layer.stride
        self.padding, self.dilation = layer.padding, layer.dilation
        self.load(layer)

    def load(self, layer: nn.Conv2d) -> None:
        """Quantize and pack `layer`'s current weights (in place: a pull's repack)."""
        weight = layer.weight.detach()
        with _quiet():
            self.gemm.set_weight_bias(
                qint8_weight(weight.reshape(weight.shape[0], -1), self.per_channel),
                _bias(layer))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, _, h, w = x.shape
        cols = F.unfold(x, self.kernel_size, self.dilation, self.padding, self.stride)
        out = self.gemm(cols.transpose(1, 2))  # (n, positions, out_channels)
        h_out, w_out = (
            (size + 2 * p - d * (k - 1) - 1) // s + 1
            for size, p, d, k, s in zip((h, w), self.padding, self.dilation, self.kernel_size,
                                        self.stride))
        return out.transpose(1, 2).reshape(n, -1, h_out, w_out)


def int8_conv(layer: nn.Module, per_channel: bool) -> nn.Module:
    """A real int8 convolution (weights per tensor or per output channel); Conv2d only."""
    if not isinstance(layer, nn.Conv2d):
        raise ValueError(f"int8 kernels take Linear and Conv2d layers, not {type(layer).__name__}:"
                         " use actors.int8_mode=paper for it")
    return Int8Conv2d(layer, per_channel)


class Fp16Linear(nn.Module):
    """A Linear with fp16 weights on fbgemm's fp16 GEMM (fp32 accumulation)."""

    def __init__(self, layer: nn.Linear) -> None:
        super().__init__()
        self.gemm = _gemm(layer, torch.float16)
        self.load(layer)

    def load(self, layer: nn.Linear) -> None:
        """Pack `layer`'s current weights in fp16 (in place: a pull's repack)."""
        self.gemm.set_weight_bias(layer.weight.detach().float().cpu(), _bias(layer))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gemm(x)
