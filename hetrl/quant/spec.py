"""What precision a policy copy runs in: shared by actors, their config and the evaluation."""

from __future__ import annotations

from dataclasses import dataclass

from hetrl.config.enums import ActorPrecision, Int8Mode


@dataclass(frozen=True)
class QuantSpec:
    """A policy copy's precision. `per_channel` gives convolutions one scale per output
    channel (QuaRL: per-channel for CNNs); Linear layers stay per-tensor. `bits` is the
    width of the `paper` fake quant (int8 kernels are 8-bit whatever it says)."""

    precision: ActorPrecision = ActorPrecision.fp32
    int8_mode: Int8Mode = Int8Mode.kernel
    per_channel: bool = True
    bits: int = 8

    def __post_init__(self) -> None:
        object.__setattr__(self, "precision", ActorPrecision(self.precision))
        object.__setattr__(self, "int8_mode", Int8Mode(self.int8_mode))
        if not 2 <= self.bits <= 8:
            raise ValueError(f"bits={self.bits!r} is invalid: valid values are integers in [2, 8]")

    @property
    def quantized(self) -> bool:
        """Whether the copy differs from the fp32 policy."""
        return self.precision != ActorPrecision.fp32

    @property
    def name(self) -> str:
        """`fp32`, `fp16`, `int8-kernel`, `int8-paper` (+ `-pc` for per-channel convs)."""
        if self.precision != ActorPrecision.int8:
            return self.precision.value
        return f"int8-{self.int8_mode.value}" + ("-pc" if self.per_channel else "")
