"""QuaRL's quantization-aware training: fp32 training with fake-quantized weights and
activations once the learner has made `quant_delay` updates.

Every Linear and Conv layer of every network of the learner (policy and critic, online and
target: QuaRL QATs all components; each network of a stacked layer as its own) gets
- its weight through QuaRL's quantizer Q_n (hetrl.quant, per output channel for convolutions
  when `per_channel`), as a parametrization, so the fp32 weight stays the one the optimizer
  updates;
- its input through Q_n, per tensor with δ from the tensor itself (the extract's dynamic
  range; it suggests an EMA of min/max as an option, not done here);
both with the straight-through gradient dQ/dW = I. Before the delay the parametrization and the
hook return their input unchanged, so training is bitwise the fp32 training.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import parametrize

from hetrl.algos.base import Learner
from hetrl.algos.ensemble import StackedLinear
from hetrl.partition.costs import Plan
from hetrl.partition.graph import TaskGraph
from hetrl.precision.base import PrecisionNeeds
from hetrl.precision.uniform import UniformPrecision
from hetrl.quant.ptq import LAYERS
from hetrl.quant.quantizers import fake_quant_ste


class QuantDelay:
    """Whether fake quantization is on: once the learner has made `delay` updates. Shared by
    every layer (copying a network keeps it pointing at the same learner). A compiled update
    reads it as a constant of its graph: it is one of the learner's `modes`, so the update
    gets a graph for each setting."""

    def __init__(self, learner: Learner, delay: int) -> None:
        self.learner, self.delay = learner, delay

    @torch.compiler.assume_constant_result
    def __call__(self) -> bool:
        return self.learner.updates >= self.delay

    def __deepcopy__(self, memo: dict) -> QuantDelay:
        return self


class FakeQuantWeight(nn.Module):
    """The weight parametrization: Q_n with a straight-through gradient, once `on()`."""

    def __init__(self, on: QuantDelay, bits: int, per_channel: bool) -> None:
        super().__init__()
        self.on, self.bits, self.per_channel = on, bits, per_channel

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return fake_quant_ste(weight, self.bits, self.per_channel) if self.on() else weight


class QATPrecision(UniformPrecision):
    """fp32 numerics, plus QuaRL's fake quantization after `quant_delay` learner updates."""

    # the parametrized layers cannot be pickled whole into an actor pool's processes (torch
    # serializes them only through state_dict); ActorQ's actors quantize by `actors.precision`
    needs = PrecisionNeeds(travels=False)

    def __init__(self, bits: int, quant_delay: int, per_channel: bool) -> None:
        super().__init__("float32", None)
        self.bits, self.quant_delay, self.per_channel = bits, quant_delay, per_channel

    def apply(self, learner: Learner, graph: TaskGraph | None, plan: Plan | None,
              platform: object) -> None:
        on = QuantDelay(learner, self.quant_delay)
        learner.modes.append(on)
        bits = self.bits

        def quantize_input(module: nn.Module, args: tuple) -> tuple | None:
            return (fake_quant_ste(args[0], bits), *args[1:]) if on() else None

        def quantize_inputs(module: nn.Module, args: tuple) -> tuple | None:
            """Each stacked network's input on its own, as its own layer's would be."""
            return (fake_quant_ste(args[0], bits, True), *args[1:]) if on() else None

        for layer in [m for m in learner.modules() if isinstance(m, (*LAYERS, StackedLinear))]:
            stacked = isinstance(layer, StackedLinear)  # slice k: network k's whole weight
            per_channel = stacked or self.per_channel and not isinstance(layer, nn.Linear)
            parametrize.register_parametrization(layer, "weight",
                                                 FakeQuantWeight(on, bits, per_channel))
            layer.register_forward_pre_hook(quantize_inputs if stacked else quantize_input)
