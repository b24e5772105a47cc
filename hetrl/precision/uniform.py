"""One dtype for the whole learner update: fp32, bf16 or fp16 (fp32 weights; autocast, or
rounding where the device would emulate the dtype: `hetrl.precision.native`)."""

from __future__ import annotations

import contextlib
from typing import Callable

import torch

from hetrl.algos.base import Learner
from hetrl.config.enums import DType
from hetrl.partition.costs import Plan
from hetrl.partition.graph import Node, TaskGraph
from hetrl.precision.base import PrecisionNeeds
from hetrl.precision.native import compute_in
from hetrl.precision.scaling import LossScaling


class UniformPrecision:
    """fp32; bf16; or fp16 with dynamic loss scaling, where an overflowing step is skipped
    (and counted) and the scale backs off."""

    needs = PrecisionNeeds()

    def __init__(self, dtype: str, loss_scaling: LossScaling | None) -> None:
        self.dtype_name = DType(dtype).value
        self.dtype = getattr(torch, self.dtype_name)
        self.loss_scaling = loss_scaling  # float16's; None where nothing is scaled

    @property
    def host_dtypes(self) -> tuple[str, ...]:
        """The dtype the host measures each layer pass in: this one."""
        return (self.dtype_name,)

    def dtype_chooser(self, platform: object) -> Callable[[Node, str], str]:
        """The dtype of every node on every device: the same one."""
        return lambda node, device: self.dtype_name

    def apply(self, learner: Learner, graph: TaskGraph | None, plan: Plan | None,
              platform: object) -> None:
        """Whatever the plan, the whole update runs in one dtype (see `autocast`)."""
        if self.dtype == torch.float16:
            learner.scaler = self.loss_scaling.scaler(learner.device)

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager:
        """The context the learner's update runs in."""
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return compute_in(device.type, self.dtype)
