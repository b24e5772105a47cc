"""One dtype for the whole learner update: fp32, bf16 or fp16 (autocast, fp32 weights)."""

from __future__ import annotations

import contextlib

import torch

from hetrl.precision.scaling import LossScaling
from hetrl.schema import DType


class UniformPrecision:
    """fp32; bf16 autocast; or fp16 autocast with dynamic loss scaling, where an overflowing
    step is skipped (and counted) and the scale backs off."""

    def __init__(self, dtype: str, loss_scaling: LossScaling | None = None) -> None:
        self.dtype_name = DType(dtype).value
        self.dtype = getattr(torch, self.dtype_name)
        self.loss_scaling = loss_scaling or LossScaling()

    def dtype_for(self, node: object, device: str) -> str:
        """The dtype a node runs in on a device (every node, every device: the same)."""
        return self.dtype_name

    def grad_scaler(self, device: torch.device) -> torch.amp.GradScaler | None:
        return self.loss_scaling.scaler(device) if self.dtype == torch.float16 else None

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager:
        """The context the learner's update runs in."""
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=self.dtype)
