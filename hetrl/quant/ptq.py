"""Post-training quantization: an inference-only copy of a policy network in a given precision.

Every Linear and Conv layer of the copy is replaced (QuaRL: all layers, first and last
included); everything else (activations, output scaling, buffers) stays as it is, so the
copy keeps its module's methods (`mode`, `distribution`, ...). Biases stay float32.

- fp16: weights and each layer's input rounded through IEEE half (QuaRL's fp16 PTQ);
  Linear layers run fbgemm's fp16 GEMM, convolutions compute in float on the rounded values.
- int8 `paper`: QuaRL's quantizer as printed, as fake quant on weights (per output channel
  for convolutions when `per_channel`) and on each layer's input (dynamic, per tensor).
- int8 `kernel`: real int8 kernels (hetrl.quant.kernels). They run on the CPU only: a layer
  of a policy on another device computes on the CPU and hands its output back there.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from hetrl.quant import kernels
from hetrl.quant.quantizers import paper_fake_quant
from hetrl.quant.spec import ActorPrecision, Int8Mode, QuantSpec

LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


class Fp16Input(nn.Module):
    """Rounds the input through half precision, then runs `layer` (fp16 weights)."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x.half().float())


class OnCpu(nn.Module):
    """Runs a CPU-only layer for inputs on another device (a CUDA learner's policy)."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x.cpu()).to(x.device)


class PaperQuantInput(nn.Module):
    """QuaRL's fake quant on the input (per tensor, δ from this very input), then `layer`."""

    def __init__(self, layer: nn.Module, bits: int) -> None:
        super().__init__()
        self.layer, self.bits = layer, bits

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(paper_fake_quant(x, self.bits))

    def extra_repr(self) -> str:
        return f"bits={self.bits}"


def quantize_layer(layer: nn.Module, spec: QuantSpec) -> nn.Module:
    """One Linear or Conv layer in the spec's precision (see the module docstring)."""
    conv = not isinstance(layer, nn.Linear)
    if spec.precision == ActorPrecision.fp16:
        if not conv:
            return Fp16Input(kernels.fp16_linear(layer))
        rounded = copy.deepcopy(layer)
        rounded.weight.data = rounded.weight.data.half().float()
        return Fp16Input(rounded)
    if spec.int8_mode == Int8Mode.kernel:
        real = kernels.int8_conv(layer, spec.per_channel) if conv else kernels.int8_linear(layer)
        return real if layer.weight.device.type == "cpu" else OnCpu(real)
    fake = copy.deepcopy(layer)
    fake.weight.data = paper_fake_quant(fake.weight.data, spec.bits, spec.per_channel and conv)
    return PaperQuantInput(fake, spec.bits)


def quantize_policy(module: nn.Module, spec: QuantSpec) -> nn.Module:
    """An inference-only copy of `module` in `spec`'s precision (fp32: a plain copy).

    The copy has no gradients and is in eval mode; the original is left untouched.
    """
    out = copy.deepcopy(module).eval().requires_grad_(False)
    if spec.quantized:
        _replace_layers(out, spec)
    return out


def _replace_layers(parent: nn.Module, spec: QuantSpec) -> None:
    for name, child in parent.named_children():
        if isinstance(child, LAYERS):
            setattr(parent, name, quantize_layer(child, spec))
        else:
            _replace_layers(child, spec)
