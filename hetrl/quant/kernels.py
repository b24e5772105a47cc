"""The one adapter to PyTorch's quantized kernels (`torch.ao`, deprecated in favour of torchao):
moving to another backend is a change here only.

Int8 layers are dynamically quantized: weights are stored as symmetric int8 (per tensor, or
per output channel for convolutions), each input is quantized per tensor on the fly, the
product accumulates in int32 and comes back as float32. Float16 Linear layers keep fp16
weights and run fbgemm's fp16 GEMM.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Iterator

import torch
import torch.ao.nn.quantized.dynamic as nnqd
from torch import nn

from hetrl.quant.quantizers import quantize_affine

CONVS = {nn.Conv1d: nnqd.Conv1d, nn.Conv2d: nnqd.Conv2d, nn.Conv3d: nnqd.Conv3d}


@contextmanager
def _quiet() -> Iterator[None]:
    """torch.ao's deprecation notices (they point to torchao) on every quantized tensor."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*quantiz.*deprecated.*")
        warnings.filterwarnings("ignore", message=".*DynamicQuantizedConv.*")
        yield


def _engine() -> None:
    """QNNPACK has no fp16 path and is slower on x86: prefer x86, then fbgemm."""
    for engine in ("x86", "fbgemm"):
        if engine in torch.backends.quantized.supported_engines:
            torch.backends.quantized.engine = engine
            return


def _qint8_weight(weight: torch.Tensor, per_channel: bool) -> torch.Tensor:
    q = quantize_affine(weight, bits=8, per_channel=per_channel, symmetric=True)
    w = weight.detach().float()
    if per_channel:
        return torch.quantize_per_channel(w, q.scale.flatten().double(),
                                          q.zero_point.flatten().long(), 0, torch.qint8)
    return torch.quantize_per_tensor(w, float(q.scale), 0, torch.qint8)


def _bias(layer: nn.Module) -> torch.Tensor | None:
    return None if layer.bias is None else layer.bias.detach().float()


def int8_linear(layer: nn.Linear) -> nn.Module:
    """A real int8 Linear (per-tensor symmetric weights, dynamic per-tensor inputs)."""
    _engine()
    with _quiet():
        out = nnqd.Linear(layer.in_features, layer.out_features, bias_=layer.bias is not None,
                          dtype=torch.qint8)
        out.set_weight_bias(_qint8_weight(layer.weight, per_channel=False), _bias(layer))
    return out


def int8_conv(layer: nn.Conv1d | nn.Conv2d | nn.Conv3d, per_channel: bool) -> nn.Module:
    """A real int8 convolution (weights per tensor or per output channel)."""
    _engine()
    with _quiet():
        out = CONVS[type(layer)](
            layer.in_channels, layer.out_channels, layer.kernel_size, stride=layer.stride,
            padding=layer.padding, dilation=layer.dilation, groups=layer.groups,
            bias=layer.bias is not None, padding_mode=layer.padding_mode)
        out.set_weight_bias(_qint8_weight(layer.weight, per_channel), _bias(layer))
    return out


def fp16_linear(layer: nn.Linear) -> nn.Module:
    """A Linear with fp16 weights on fbgemm's fp16 GEMM (fp32 accumulation)."""
    _engine()
    out = nnqd.Linear(layer.in_features, layer.out_features, bias_=layer.bias is not None,
                      dtype=torch.float16)
    out.set_weight_bias(layer.weight.detach().float(), _bias(layer))
    return out

