"""The machine hetrl runs on: its real devices, measured rather than modeled."""

from __future__ import annotations

import os
import platform as _platform
from time import perf_counter

import gymnasium as gym
import numpy as np
import torch

from hetrl.algos.base import Learner
from hetrl.config.enums import Device
from hetrl.config.errors import ConfigError
from hetrl.partition.costs import CostTable
from hetrl.partition.graph import TaskGraph
from hetrl.platform.measure import measure_step


def resolve_device(device: str) -> torch.device:
    """`auto` picks CUDA when present, else the CPU; `cuda` without a GPU is an error."""
    device = Device(device).value
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device='cuda' is invalid here: no CUDA device; valid: auto, cpu")
    return torch.device(device)


def use_threads(threads: int | None) -> None:
    """torch's intra-op threads (None: torch's default, all cores). One thread suits small RL
    networks and leaves a core to the envs; two collapse when another process holds a core."""
    if threads is not None:
        torch.set_num_threads(threads)


class HostPlatform:
    """This machine's torch devices. With `measure_layers`, a job times each node of its
    training step on each of them (`hetrl.platform.measure`) and plans over those costs."""

    def __init__(self, device: str, threads: int | None = None,
                 measure_layers: bool = True) -> None:
        self.device = resolve_device(device)
        self.measure_layers = measure_layers
        use_threads(threads)

    @property
    def devices(self) -> list[str]:
        """The CPU, and the GPU when CUDA is present."""
        return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]

    def cost_table(self, graph: TaskGraph, learner: Learner, obs_space: gym.Space,
                   act_space: gym.Space) -> CostTable:
        """Every node measured on every device; an edge between devices costs its bytes over
        the measured host-device copy bandwidth. No resource limits."""
        seconds = np.stack([measure_step(learner, graph, obs_space, act_space, torch.device(d))
                            for d in self.devices], axis=1)
        comm = np.zeros((len(graph.edges), len(self.devices), len(self.devices)))
        if len(self.devices) > 1:
            per_byte = _copy_seconds_per_byte()
            for e, edge in enumerate(graph.edges):
                comm[e] = edge.bytes * per_byte * (1 - np.eye(len(self.devices)))
        return CostTable(graph, self.devices, seconds, comm, {}, {})

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


def _copy_seconds_per_byte(nbytes: int = 1 << 24, repeats: int = 5) -> float:
    """Host -> GPU copy time per byte, measured on pinned memory (the best of `repeats`)."""
    src = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    best = float("inf")
    for _ in range(repeats):
        start = perf_counter()
        src.to("cuda", non_blocking=False)
        torch.cuda.synchronize()
        best = min(best, perf_counter() - start)
    return best / nbytes
