"""An analytical platform: roofline node times with launch overhead, and link transfer times.

Every number comes from the platform's YAML (conf/platform/*.yaml, schema
`hetrl.config.platform.ModeledPlatformConfig`); none of it is measured. A node i on device k in dtype d
takes

    t = launch_s[k] + max(flops_i / rate[k][d], bytes_i(d) / mem_bandwidth[k])

with bytes_i = bytes_in + bytes_out + param_bytes, given for float32 and scaled by d's width
(specs/ap-drl-pearl.md §A.2.4), plus, for a weight layer in fp16, the sync of its master
weights with the host (`master_sync_seconds`). The numerics of a job still run for real on
this host (`.device`); only the step time is modeled.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from hetrl.config.enums import DType
from hetrl.config.platform import BaselineSpec, DeviceSpec, LinkSpec
from hetrl.partition.costs import CostTable
from hetrl.partition.graph import Node, Pass, TaskGraph
from hetrl.platform.host import resolve_device
from hetrl.platform.links import LinkNetwork
from hetrl.runtime import configure_torch

DTypeFor = Callable[[Node, str], str]
"""The precision policy's choice: the dtype a node computes in on a device."""

MASTER_WEIGHT_DTYPES = frozenset({DType.float16})
"""Dtypes that train on a working copy of higher-precision master weights (AP-DRL Table II)."""


def dtype_scale(dtype: str) -> float:
    """Bytes of a tensor in `dtype` per byte of the same tensor in float32."""
    return getattr(torch, DType(dtype).value).itemsize / 4


class ModeledPlatform:
    """Devices with effective per-dtype rates, memory bandwidth, launch overhead, allowed node
    kinds and resources, joined by links (see `LinkNetwork`)."""

    def __init__(self, name: str, device: str, host: str, devices: Mapping[str, DeviceSpec],
                 links: Sequence[LinkSpec], baselines: Mapping[str, BaselineSpec] | None,
                 threads: int | None, host_runtime_s: float) -> None:
        configure_torch(threads)
        self.host_runtime_s = host_runtime_s  # PEARL: one hand-over between host primitives
        self.name = name
        self.baselines = dict(baselines or {})
        self.device = resolve_device(device)
        self.host = host
        self.specs = dict(devices)
        self.devices = list(self.specs)
        self.links = list(links)
        self._network = LinkNetwork(self.links)

    def node_seconds(self, node: Node, device: str, dtype: str) -> float:
        """The node's time on the device in dtype; inf where the device may not run the node's
        kind or has no rate for the dtype (so a partitioner keeps the node off it)."""
        spec = self.specs[device]
        rate = spec.rates.get(DType(dtype))
        if node.kind not in spec.runs or rate is None:
            return math.inf
        nbytes = (node.bytes_in + node.bytes_out + node.param_bytes) * dtype_scale(dtype)
        return spec.launch_s + max(node.flops / rate, nbytes / spec.mem_bandwidth)

    def clocked(self, device: str, scale: float) -> ModeledPlatform:
        """A copy with `device` clocked `scale` times as fast: its rates and memory bandwidth
        times `scale`, its launch time divided by it (all clock-bound on an FPGA; links are
        left as they are). For a baseline on slower fabric, e.g. FIXAR's PL at 164 MHz against
        AP-DRL's 245 MHz (spec D.1 #16)."""
        if scale <= 0:
            raise ValueError(f"scale={scale!r} is invalid: valid values are > 0")
        spec = self.specs[device]
        scaled = dataclasses.replace(
            spec, rates={dtype: rate * scale for dtype, rate in spec.rates.items()},
            mem_bandwidth=spec.mem_bandwidth * scale, launch_s=spec.launch_s / scale)
        clone = copy.copy(self)
        clone.specs = {**self.specs, device: scaled}
        return clone

    def edge_seconds(self, nbytes: float, src: str, dst: str) -> float:
        """Time to move nbytes from device src to dst (0 when src == dst)."""
        return self._network.seconds(nbytes, src, dst)

    def master_sync_seconds(self, node: Node, device: str, dtype: str) -> float:
        """AP-DRL §A.2.5-A.2.6: a weight layer computing in fp16 works on a copy of the fp32
        master weights the host keeps, and the paper's PL dataflow streams those masters with
        each pass's input ("master-weight backups accompany input data streams" [P]), without
        overlapping compute (Table IV: ≥ 22 % slower on small networks [P]). So each forward
        pass fetches param_bytes of masters from the host and the update writes them back,
        both over the link(s) to the host and added to the node's time; a backward reuses its
        forward's working copy. Wherever the update runs, the next step's forward pays the
        fetch, so a plan cannot dodge the sync by moving updates to the host."""
        if (DType(dtype) not in MASTER_WEIGHT_DTYPES or node.pass_ is Pass.backward
                or not node.param_bytes):
            return 0.0
        return self.edge_seconds(node.param_bytes, device, self.host)

    def cost_table(self, graph: TaskGraph, dtype_for: DTypeFor,
                   master_weight_sync: bool = True) -> CostTable:
        """Costs of the graph under a precision policy.

        `seconds` includes the master-weight sync of fp16 nodes unless `master_weight_sync` is
        off. An edge moves its bytes in the dtype its source node computes in on the source
        device. A resource lives on the one device whose `capacity` names it, and
        `usage[r][i, k]` is what node i takes of r when placed on k, on r's device or another
        (an AIE node takes PL LUTs for its PLIO movers): all of it counts against `capacity[r]`.
        """
        nodes, names = graph.nodes, self.devices
        dtypes = [[dtype_for(node, name) for name in names] for node in nodes]
        seconds = np.array([
            [self.node_seconds(node, name, dtype)
             + (self.master_sync_seconds(node, name, dtype) if master_weight_sync else 0.0)
             for name, dtype in zip(names, row)]
            for node, row in zip(nodes, dtypes)
        ]).reshape(len(nodes), len(names))
        comm = np.array([
            [[self.edge_seconds(edge.bytes * dtype_scale(dtypes[edge.src][k]), src, dst)
              for dst in names] for k, src in enumerate(names)]
            for edge in graph.edges
        ]).reshape(len(graph.edges), len(names), len(names))
        specs = list(self.specs.values())
        capacity = {r: float(amount) for spec in specs for r, amount in spec.capacity.items()}
        usage = {
            r: np.array([[float(spec.usage.get(node.kind, {}).get(r, 0.0)) for spec in specs]
                         for node in nodes]).reshape(len(nodes), len(names))
            for r in capacity
        }
        return CostTable(graph, list(names), seconds, comm, usage, capacity)

    def describe(self) -> dict[str, str]:
        """What is modeled, for the run's params."""
        return {
            "device": str(self.device),
            "platform": self.name,
            "modeled_devices": ", ".join(f"{n} ({s.kind})" for n, s in self.specs.items()),
            "modeled_host": self.host,
        }
