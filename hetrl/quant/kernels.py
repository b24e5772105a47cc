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

from hetrl.quant.quantizers import quantize_affine


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


def _qint8_weight(weight: torch.Tensor, per_channel: bool) -> torch.Tensor:
    w = weight.detach().float().cpu()
    q = quantize_affine(w, bits=8, per_channel=per_channel, symmetric=True)
    if per_channel:
        return torch.quantize_per_channel(w, q.scale.flatten().double(),
                                          q.zero_point.flatten().long(), 0, torch.qint8)
    return torch.quantize_per_tensor(w, float(q.scale), 0, torch.qint8)


def _bias(layer: nn.Module) -> torch.Tensor | None:
    return None if layer.bias is None else layer.bias.detach().float().cpu()


def _int8_gemm(weight: torch.Tensor, bias: torch.Tensor | None, per_channel: bool) -> nn.Module:
    _engine()
    out_features, in_features = weight.shape
    with _quiet():
        out = nnqd.Linear(in_features, out_features, bias_=bias is not None, dtype=torch.qint8)
        out.set_weight_bias(_qint8_weight(weight, per_channel), bias)
    return out


def int8_linear(layer: nn.Linear) -> nn.Module:
    """A real int8 Linear (per-tensor symmetric weights, dynamic per-tensor inputs)."""
    return _int8_gemm(layer.weight.detach(), _bias(layer), per_channel=False)


class Int8Conv2d(nn.Module):
    """A Conv2d as an int8 GEMM on its unfolded input patches (groups = 1, zero padding)."""

    def __init__(self, layer: nn.Conv2d, per_channel: bool) -> None:
        super().__init__()
        if layer.groups != 1 or layer.padding_mode != "zeros" or isinstance(layer.padding, str):
            raise ValueError(f"int8 kernels take Conv2d with groups=1, numeric zero padding: "
                             f"got groups={layer.groups}, padding={layer.padding!r}, "
                             f"padding_mode={layer.padding_mode!r}")
        weight = layer.weight.detach()
        self.gemm = _int8_gemm(weight.reshape(weight.shape[0], -1), _bias(layer), per_channel)
        self.kernel_size, self.stride = layer.kernel_size, layer.stride
        self.padding, self.dilation = layer.padding, layer.dilation

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


def fp16_linear(layer: nn.Linear) -> nn.Module:
    """A Linear with fp16 weights on fbgemm's fp16 GEMM (fp32 accumulation)."""
    _engine()
    out = nnqd.Linear(layer.in_features, layer.out_features, bias_=layer.bias is not None,
                      dtype=torch.float16)
    out.set_weight_bias(layer.weight.detach().float().cpu(), _bias(layer))
    return out

