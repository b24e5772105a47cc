"""Platform schemas: the measured host, and modeled platforms of devices and links
(hetrl.platform.model explains the formulas)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import II, MISSING

from hetrl.config.enums import Device, DType, Kind
from hetrl.config.errors import require


def _check_threads(threads: Optional[int]) -> None:
    require(threads is None or threads >= 1, "platform.threads", threads, "null or integers >= 1")


@dataclass
class PlatformConfig:
    _target_: str = MISSING
    device: Device = II("device")  # the torch device the numerics really run on (this host)


@dataclass
class HostPlatformConfig(PlatformConfig):
    threads: Optional[int] = MISSING  # torch intra-op threads; null keeps torch's default
    measure_layers: bool = MISSING  # time each node of the step on each device before training
    reuse_plan: bool = MISSING  # train in the plan recorded for the same step on this machine

    def __post_init__(self) -> None:
        _check_threads(self.threads)


@dataclass
class DeviceSpec:
    """One compute unit of a modeled platform.

    `kind` is a free-form label (cpu, gpu, fpga, npu, ...) for reports; it has no effect on
    the model. `rates` are *effective* (sustained) FLOP/s per dtype the unit can compute in,
    natively or emulated; `peak` holds raw peaks for reference only. `capacity` names the
    resources this unit owns (names are unique on a platform); `usage[kind][resource]` is
    what one node of that kind placed here takes, from this unit's or another unit's
    resources (an AIE node also takes PL LUTs for its PLIO data movers).
    """

    kind: str = MISSING
    label: Optional[str] = None  # what it is, for pictures ("AI Engine"); default: from kind
    rates: dict[DType, float] = MISSING  # FLOP/s
    native: list[DType] = MISSING  # dtypes computed without emulation
    peak: dict[DType, float] = field(default_factory=dict)  # FLOP/s, reference only
    mem_bandwidth: float = MISSING  # bytes/s
    launch_s: float = 0.0  # kernel launch / initialization, paid by every node
    runs: list[Kind] = field(default_factory=lambda: list(Kind))  # node kinds it may run
    capacity: dict[str, float] = field(default_factory=dict)
    # dict[str, Any]: OmegaConf rejects ints in a dict of dict of float; checked below
    usage: dict[Kind, dict[str, Any]] = field(default_factory=dict)
    # a pipelined dataflow fabric (an FPGA): PEARL's composer models its Replay Manager and
    # Learner in cycles of this clock (Eqs. 2-5); null: by the roofline as any other device
    clock_hz: Optional[float] = None
    sram_bytes: Optional[float] = None  # on-chip memory: RM + Learner co-locate if they fit


@dataclass
class LinkSpec:
    """A symmetric link between two devices of a modeled platform."""

    between: list[str] = MISSING  # two device names
    bandwidth: float = MISSING  # bytes/s
    latency_s: float = 0.0
    runtime_overhead_s: float = 0.0  # host-runtime cost of every transfer (PEARL artifact: 1 ms)
    shared_memory: bool = False  # one address space: a transfer copies nothing and costs 0


@dataclass
class BaselineSpec:
    """A plan to compare with: every node on `device` (nodes it cannot run fall back to their
    fastest device) in `dtype`, the device clocked at `clock` times its modeled rate (a
    slower fabric, e.g. FIXAR's PL at 164 of 245 MHz), with or without fp32 master weights."""

    device: str = MISSING
    dtype: DType = DType.float32
    clock: float = 1.0
    master_weight_sync: bool = True


@dataclass
class ModeledPlatformConfig(PlatformConfig):
    _convert_: str = "object"  # the model gets DeviceSpec and LinkSpec objects, not dicts
    name: str = MISSING
    threads: Optional[int] = 1  # torch intra-op threads of those numerics, as platform=host
    host: str = MISSING  # the modeled device that keeps the fp32 master weights
    devices: dict[str, DeviceSpec] = MISSING
    links: list[LinkSpec] = MISSING  # [] for a platform of one device
    # the plans the chosen one is compared with: name -> every node on one device, one dtype
    baselines: dict[str, BaselineSpec] = MISSING
    # PEARL's composer: a transfer between two primitives that both live on the host goes
    # through the host runtime's queues (DCQ, RRQ, LAQ) and costs this much
    host_runtime_s: float = 0.0

    def __post_init__(self) -> None:
        _check_threads(self.threads)
        require(self.host_runtime_s >= 0, "platform.host_runtime_s", self.host_runtime_s,
                "floats >= 0 (seconds)")
        names = sorted(self.devices)
        require(len(names) > 0, "platform.devices", names, "a non-empty mapping of devices")
        require(self.host in self.devices, "platform.host", self.host, f"one of {names}")
        owners = [r for spec in self.devices.values() for r in spec.capacity]
        require(len(owners) == len(set(owners)), "platform.devices.*.capacity", owners,
                "resource names that are unique across devices")
        for name, spec in self.devices.items():
            _check_device(f"platform.devices.{name}", spec, set(owners))
        pairs: set[frozenset[str]] = set()
        for i, link in enumerate(self.links):
            key = f"platform.links.{i}"
            ends = list(link.between)
            require(len(ends) == 2 and ends[0] != ends[1] and set(ends) <= set(names),
                    f"{key}.between", ends, f"two different devices of {names}")
            require(frozenset(ends) not in pairs, f"{key}.between", ends,
                    "a pair of devices not linked already")
            pairs.add(frozenset(ends))
            require(link.bandwidth > 0, f"{key}.bandwidth", link.bandwidth, "floats > 0 (bytes/s)")
            require(link.latency_s >= 0, f"{key}.latency_s", link.latency_s, "floats >= 0")
            require(link.runtime_overhead_s >= 0, f"{key}.runtime_overhead_s",
                    link.runtime_overhead_s, "floats >= 0")
        for name, baseline in self.baselines.items():
            key = f"platform.baselines.{name}"
            require(baseline.device in self.devices, f"{key}.device", baseline.device,
                    f"one of {names}")
            rates = sorted(d.value for d in self.devices[baseline.device].rates)
            require(baseline.dtype in self.devices[baseline.device].rates, f"{key}.dtype",
                    baseline.dtype.value, f"dtypes {baseline.device} has a rate for ({rates})")
            require(baseline.clock > 0, f"{key}.clock", baseline.clock, "floats > 0")
        unreachable = sorted(set(names) - _reachable(self.host, pairs))
        require(not unreachable, "platform.links", f"no route to {unreachable}",
                f"links that connect every device to the host {self.host!r}")


def _check_device(key: str, spec: DeviceSpec, resources: set[str]) -> None:
    require(len(spec.rates) > 0 and all(r > 0 for r in spec.rates.values()), f"{key}.rates",
            dict(spec.rates), "a non-empty mapping of dtype -> FLOP/s > 0")
    require(set(spec.native) <= set(spec.rates), f"{key}.native", list(spec.native),
            f"dtypes that have a rate ({sorted(d.value for d in spec.rates)})")
    require(all(p > 0 for p in spec.peak.values()), f"{key}.peak", dict(spec.peak),
            "FLOP/s > 0")
    require(spec.mem_bandwidth > 0, f"{key}.mem_bandwidth", spec.mem_bandwidth,
            "floats > 0 (bytes/s)")
    require(spec.launch_s >= 0, f"{key}.launch_s", spec.launch_s, "floats >= 0 (seconds)")
    require(spec.clock_hz is None or spec.clock_hz > 0, f"{key}.clock_hz", spec.clock_hz,
            "null or floats > 0 (Hz)")
    require(spec.sram_bytes is None or spec.sram_bytes >= 0, f"{key}.sram_bytes",
            spec.sram_bytes, "null or floats >= 0 (bytes)")
    require(len(spec.runs) > 0, f"{key}.runs", list(spec.runs),
            f"a non-empty list of {[k.value for k in Kind]}")
    require(all(c >= 0 for c in spec.capacity.values()), f"{key}.capacity",
            dict(spec.capacity), "amounts >= 0")
    for kind, amounts in spec.usage.items():
        require(kind in spec.runs, f"{key}.usage", kind.value,
                f"node kinds the device runs ({[k.value for k in spec.runs]})")
        require(set(amounts) <= resources
                and all(isinstance(a, (int, float)) and a >= 0 for a in amounts.values()),
                f"{key}.usage.{kind.value}", dict(amounts),
                f"amounts >= 0 of the platform's resources ({sorted(resources)})")


def _reachable(start: str, pairs: set[frozenset[str]]) -> set[str]:
    seen, frontier = {start}, [start]
    while frontier:
        here = frontier.pop()
        for pair in pairs:
            if here in pair:
                (other,) = pair - {here}
                if other not in seen:
                    seen.add(other)
                    frontier.append(other)
    return seen
