"""The machine hetrl runs on: its real devices, measured rather than modeled."""

from __future__ import annotations

import os
import platform as _platform

import torch

from hetrl.schema import ConfigError, Device


def resolve_device(device: str) -> torch.device:
    """`auto` picks CUDA when present, else the CPU; `cuda` without a GPU is an error."""
    device = Device(device).value
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device='cuda' is invalid here: no CUDA device; valid: auto, cpu")
    return torch.device(device)


class HostPlatform:
    def __init__(self, device: str, threads: int | None = None) -> None:
        self.device = resolve_device(device)
        if threads is not None:
            torch.set_num_threads(threads)

    def describe(self) -> dict[str, str]:
        """What this host is, for the run's params."""
        info = {
            "device": str(self.device),
            "cpu": _platform.processor() or _platform.machine(),
            "cpu_count": str(os.cpu_count()),
            "torch_threads": str(torch.get_num_threads()),
            "torch": torch.__version__,
        }
        if self.device.type == "cuda":
            info["gpu"] = torch.cuda.get_device_name(self.device)
        return info
