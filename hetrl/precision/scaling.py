"""Dynamic loss scaling for float16 training (AP-DRL Fig. 9, PyTorch GradScaler semantics)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LossScaling:
    """Scale S starts at `init_scale`; an overflow skips the step and multiplies S by
    `backoff_factor`; `growth_interval` clean steps multiply it by `growth_factor`."""

    init_scale: float  # the values are precision.loss_scaling's (LossScalingConfig)
    growth_factor: float
    backoff_factor: float
    growth_interval: int

    def scaler(self, device: torch.device) -> torch.amp.GradScaler:
        return torch.amp.GradScaler(
            device.type, init_scale=self.init_scale, growth_factor=self.growth_factor,
            backoff_factor=self.backoff_factor, growth_interval=self.growth_interval,
        )
