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

A layer trained with QAT (hetrl.precision.qat) is copied as it computes now: its weight is
the fake-quantized one once QAT is on.
"""

from __future__ import annotations

import copy
from functools import partial
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from hetrl.quant import kernels
from hetrl.quant.quantizers import paper_fake_quant
from hetrl.quant.spec import ActorPrecision, Int8Mode, QuantSpec

LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
CONV_FNS = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


Quantizer = Callable[[torch.Tensor], torch.Tensor]


def round_half(x: torch.Tensor) -> torch.Tensor:
    """x rounded to the nearest IEEE half, back in x's dtype."""
    return x.half().to(x.dtype)


class FakeQuantLayer(nn.Module):
    """A Linear or Conv layer computing in float on its weight passed through
    `quantize_weight` and on its input passed through `quantize_input`."""

    def __init__(self, layer: nn.Module, quantize_weight: Quantizer,
                 quantize_input: Quantizer) -> None:
        super().__init__()
        self.quantize_weight, self.quantize_input = quantize_weight, quantize_input
        self.register_buffer("weight", torch.empty_like(layer.weight))
        self.register_buffer("bias", None if layer.bias is None else torch.empty_like(layer.bias))
        self.load(layer)
        if isinstance(layer, nn.Linear):
            self.fn, self.kwargs = F.linear, {}
        else:
            if layer.padding_mode != "zeros":
                raise ValueError(f"padding_mode={layer.padding_mode!r} is not supported: "
                                 "valid values are ['zeros']")
            self.fn = CONV_FNS[layer.weight.dim() - 2]
            self.kwargs = {"stride": layer.stride, "padding": layer.padding,
                           "dilation": layer.dilation, "groups": layer.groups}

    @torch.no_grad()
    def load(self, layer: nn.Module) -> None:
        """Quantize `layer`'s current weights into this one (in place: a pull's load)."""
        self.weight.copy_(self.quantize_weight(layer.weight.detach()))
        if self.bias is not None:
            self.bias.copy_(layer.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(self.quantize_input(x), self.weight, self.bias, **self.kwargs)


class Fp16Input(nn.Module):
    """Rounds the input through half precision, then runs `layer` (fp16 weights)."""

    def __init__(self, layer: kernels.Fp16Linear) -> None:
        super().__init__()
        self.layer = layer

    def load(self, layer: nn.Linear) -> None:
        self.layer.load(layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(round_half(x))


class OnCpu(nn.Module):
    """Runs a CPU-only layer for inputs on another device (a CUDA learner's policy)."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def load(self, layer: nn.Module) -> None:
        self.layer.load(layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x.cpu()).to(x.device)


def quantize_layer(layer: nn.Module, spec: QuantSpec) -> nn.Module:
    """One Linear or Conv layer in the spec's precision (see the module docstring); it has a
    `load(layer)` that takes new weights of the same shape in place."""
    conv = not isinstance(layer, nn.Linear)
    cpu = layer.weight.device.type == "cpu"
    if spec.precision == ActorPrecision.fp16:
        if conv or not cpu:
            return FakeQuantLayer(layer, round_half, round_half)
        return Fp16Input(kernels.Fp16Linear(layer))
    if spec.int8_mode == Int8Mode.kernel:
        real = kernels.int8_conv(layer, spec.per_channel) if conv else kernels.Int8Linear(layer)
        return real if cpu else OnCpu(real)
    return FakeQuantLayer(layer, partial(paper_fake_quant, bits=spec.bits,
                                         per_channel=spec.per_channel and conv),
                          partial(paper_fake_quant, bits=spec.bits))


def quantize_policy(module: nn.Module, spec: QuantSpec) -> nn.Module:
    """An inference-only copy of `module` in `spec`'s precision (fp32: a plain copy).

    The copy has no gradients and is in eval mode; the original is left untouched.
    """
    out = copy.deepcopy(module).eval().requires_grad_(False)
    if spec.quantized:
        _replace_layers(out, spec)
    return out


@torch.no_grad()
def load_into(policy: nn.Module, module: nn.Module) -> None:
    """Give `policy`, a `quantize_policy` copy of a module shaped as `module`, `module`'s
    current weights in place: each quantized layer re-quantized (its GEMM repacked, not
    rebuilt), every other parameter and buffer copied. An actor's pull: it computes what a
    new `quantize_policy(module, spec)` would, without building one."""
    for name, source in module.named_children():
        target = getattr(policy, name)
        if isinstance(source, LAYERS) and not isinstance(target, LAYERS):
            target.load(source)
        else:
            load_into(target, source)
    for key, value in (*module.named_parameters(recurse=False),
                       *module.named_buffers(recurse=False)):
        getattr(policy, key).copy_(value)


def _replace_layers(parent: nn.Module, spec: QuantSpec) -> None:
    for name, child in parent.named_children():
        if isinstance(child, LAYERS):
            setattr(parent, name, quantize_layer(child, spec))
        else:
            _replace_layers(child, spec)
