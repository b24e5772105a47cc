"""The machine hetrl runs on: its real devices, measured rather than modeled."""

from __future__ import annotations

import os
import platform as _platform
from time import perf_counter
from typing import Mapping, Sequence

import gymnasium as gym
import numpy as np
import torch

from hetrl.algos.base import Learner
from hetrl.config.enums import Device
from hetrl.config.errors import require
from hetrl.partition.costs import CostTable
from hetrl.partition.graph import Kind, TaskGraph
from hetrl.platform.measure import measure_step
from hetrl.precision.native import CPU_NATIVE_FLAGS, cpu_native
from hetrl.runtime import configure_torch


def resolve_device(device: str) -> torch.device:
    """`auto` picks CUDA when present, else the CPU; `cuda` without a GPU is an error."""
    device = Device(device).value
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda":
        require(torch.cuda.is_available(), "platform.device", device,
                "auto, cpu (this machine has no CUDA device)")
    return torch.device(device)


class HostPlatform:
    """This machine's torch devices. With `measure_layers`, a job times each node of its
    training step on each of them (`hetrl.platform.measure`) and plans over those costs; with
    `reuse_plan`, a later job of the same step trains in that plan (`hetrl.plan_record`)."""

    def __init__(self, device: str, threads: int | None, measure_layers: bool,
                 reuse_plan: bool) -> None:
        self.device = resolve_device(device)
        self.measure_layers, self.reuse_plan = measure_layers, reuse_plan
        configure_torch(threads)

    @property
    def devices(self) -> list[str]:
        """The CPU, and the GPU when CUDA is present."""
        return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]

    def cost_table(self, graph: TaskGraph, learner: Learner, obs_space: gym.Space,
                   act_space: gym.Space, dtypes: Sequence[str] = ("float32",),
                   min_speedup: float = 1.0) -> CostTable:
        """Every node measured on every device in each of `dtypes` the device runs (the
        others cost inf there); each layer computes in the dtype `per_layer_dtypes` chooses
        from those times. An edge between devices costs its bytes over the measured
        host-device copy bandwidth. No resource limits."""
        by_dtype = {
            dtype: np.stack([
                measure_step(learner, graph, obs_space, act_space, torch.device(d), dtype=dtype)
                if dtype in runs_dtypes(d) else np.full(len(graph.nodes), np.inf)
                for d in self.devices], axis=1)
            for dtype in dtypes}
        seconds, chosen = per_layer_dtypes(graph, by_dtype, min_speedup)
        comm = np.zeros((len(graph.edges), len(self.devices), len(self.devices)))
        if len(self.devices) > 1:
            per_byte = copy_seconds_per_byte()
            for e, edge in enumerate(graph.edges):
                comm[e] = edge.bytes * per_byte * (1 - np.eye(len(self.devices)))
        return CostTable(graph, self.devices, seconds, comm, {}, {}, dtypes=chosen,
                         by_dtype=by_dtype)

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


def runs_dtypes(device: str) -> tuple[str, ...]:
    """The dtypes a torch device computes in under autocast (natively or emulated): the CPU
    all three; a GPU bfloat16 only where CUDA supports it."""
    if device == "cuda" and not torch.cuda.is_bf16_supported():
        return ("float32", "float16")
    return ("float32", "bfloat16", "float16")


def cpu_name() -> str:
    """torch's CPU capability (AVX2, AVX512, ...) and the 16-bit dtypes it has instructions
    for, as a warning names the CPU."""
    native = [d for d in CPU_NATIVE_FLAGS if cpu_native(d)]
    return (f"{torch.backends.cpu.get_cpu_capability()} CPU, 16-bit instructions: "
            f"{', '.join(native) or 'none'}")


def per_layer_dtypes(graph: TaskGraph, by_dtype: Mapping[str, np.ndarray],
                     min_speedup: float = 1.0) -> tuple[np.ndarray, list[list[str]]]:
    """Per node and device, the seconds and the dtype it computes in, from each dtype's
    measured (n_nodes, n_devices) seconds. A layer's forward and backward passes share one
    dtype (autocast runs the backward in the forward's): on each device, the dtype whose
    passes of that layer sum to the least time, where that is at least `min_speedup` times
    faster than float32, else float32 (so float32 stays where lower precision is slower); an
    elementwise layer (an activation) the dtype of the layer before it in its network. Only
    dtypes whose whole step measured no slower than float32 on the device are candidates. The
    loss and optimizer nodes run in float32 (the update rule, the fp32 master weights). With
    no float32 in `by_dtype`, every node is in the one dtype measured."""
    if "float32" not in by_dtype:
        (dtype, seconds), = by_dtype.items()  # a uniform precision: its own dtype
        return seconds.copy(), [[dtype] * seconds.shape[1] for _ in graph.nodes]
    fp32 = by_dtype["float32"]
    seconds = fp32.copy()
    chosen = [["float32"] * fp32.shape[1] for _ in graph.nodes]
    layers: dict[tuple[str, str], list[int]] = {}
    for i, node in enumerate(graph.nodes):
        if node.layer_pass:
            layers.setdefault((node.network, node.layer), []).append(i)
    # a dtype whose whole step measured slower than float32 on a device (emulated there) is
    # no candidate on it: what a lone layer seems to gain in it is noise, and a float16
    # layer brings loss scaling to the whole step
    steps = {dtype: table.sum(axis=0) for dtype, table in by_dtype.items()}
    candidates = [[d for d in by_dtype if steps[d][k] <= steps["float32"][k]]
                  for k in range(fp32.shape[1])]
    previous: dict[str, list[int]] = {}  # network -> the rows of its last layer so far
    for (network, _), rows in layers.items():
        for k in range(fp32.shape[1]):
            totals = {d: float(np.sum(by_dtype[d][rows, k])) for d in candidates[k]}
            best = min(totals, key=totals.get)
            if all(graph.nodes[i].kind is Kind.elementwise for i in rows):
                # an activation computes in what the layer before it gives (no cast between)
                best = chosen[previous[network][0]][k] if network in previous else "float32"
            elif totals[best] * min_speedup > totals["float32"]:
                best = "float32"
            for i in rows:
                seconds[i, k], chosen[i][k] = by_dtype[best][i, k], best
        previous[network] = rows
    return seconds, chosen


def uniform_dtypes(graph: TaskGraph, dtype: str) -> list[str]:
    """Per node, the dtype it computes in when every layer pass computes in `dtype`: the
    loss and optimizer nodes in float32, as in `per_layer_dtypes`."""
    return [dtype if node.layer_pass else "float32" for node in graph.nodes]


def copy_seconds_per_byte(nbytes: int = 1 << 24, repeats: int = 5) -> float:
    """Host -> GPU copy time per byte, measured on pinned memory (the best of `repeats`)."""
    src = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    best = float("inf")
    for _ in range(repeats):
        start = perf_counter()
        src.to("cuda", non_blocking=False)
        torch.cuda.synchronize()
        best = min(best, perf_counter() - start)
    return best / nbytes
