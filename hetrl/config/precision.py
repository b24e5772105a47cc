"""Precision schemas: uniform dtypes, AP-DRL's hardware-aware mixed precision, QuaRL's QAT."""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import MISSING

from hetrl.config.enums import COMPUTE_DTYPES, DType
from hetrl.config.errors import require


@dataclass
class LossScalingConfig:
    _target_: str = "hetrl.precision.scaling.LossScaling"
    init_scale: float = 2.0**16
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 200

    def __post_init__(self) -> None:
        require(self.init_scale > 0, "precision.loss_scaling.init_scale", self.init_scale,
                "floats > 0")
        require(self.growth_factor > 1, "precision.loss_scaling.growth_factor",
                self.growth_factor, "floats > 1")
        require(0 < self.backoff_factor < 1, "precision.loss_scaling.backoff_factor",
                self.backoff_factor, "floats in (0, 1)")
        require(self.growth_interval >= 1, "precision.loss_scaling.growth_interval",
                self.growth_interval, "integers >= 1")


def _compute_dtypes() -> str:
    return f"one of {[d.value for d in COMPUTE_DTYPES]}"


@dataclass
class UniformPrecisionConfig:
    _target_: str = MISSING
    dtype: DType = MISSING
    loss_scaling: LossScalingConfig = field(default_factory=LossScalingConfig)

    def __post_init__(self) -> None:
        require(self.dtype in COMPUTE_DTYPES, "precision.dtype", getattr(self.dtype, "value",
                self.dtype), _compute_dtypes())


@dataclass
class HardwareAwarePrecisionConfig:
    _target_: str = MISSING
    prefer: list[DType] = MISSING  # each device computes in the first it supports natively
    # the host: a layer computes in a lower precision only where that measured this many
    # times faster than float32
    min_speedup: float = MISSING
    loss_scaling: LossScalingConfig = field(default_factory=LossScalingConfig)

    def __post_init__(self) -> None:
        require(len(self.prefer) > 0 and all(d in COMPUTE_DTYPES for d in self.prefer),
                "precision.prefer", [getattr(d, "value", d) for d in self.prefer],
                f"a non-empty list of dtypes, each {_compute_dtypes()}")
        require(self.min_speedup >= 1, "precision.min_speedup", self.min_speedup,
                "floats >= 1")


@dataclass
class QATPrecisionConfig:
    """QuaRL's quantization-aware training (hetrl.precision.qat)."""

    _target_: str = MISSING
    bits: int = MISSING
    quant_delay: int = MISSING  # learner updates before fake quantization starts
    per_channel: bool = MISSING  # one δ per output channel of a convolution weight

    def __post_init__(self) -> None:
        require(2 <= self.bits <= 16, "precision.bits", self.bits, "integers in [2, 16]")
        require(self.quant_delay >= 0, "precision.quant_delay", self.quant_delay,
                "integers >= 0 (learner updates)")
