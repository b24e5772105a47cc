"""One dtype for the whole learner update: fp32, or bf16 autocast with fp32 weights."""

from __future__ import annotations

import contextlib

import torch

from hetrl.schema import DType


class UniformPrecision:
    def __init__(self, dtype: str) -> None:
        self.dtype = getattr(torch, DType(dtype).value)

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager:
        """The context the learner's update runs in."""
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=self.dtype)
