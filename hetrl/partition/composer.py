"""PEARL's System Composer (specs/ap-drl-pearl.md §B.2.7-B.2.9): Algorithm 2 over a platform.

Step 1 places the two compute primitives, the Replay Manager (RM: the sum tree's sampling,
update and insertion) and the Learner (one SGD step), from the N × 3 Primitive Device
Assignment Matrix M (rows: devices; columns: RM alone, Learner alone, RM + Learner on one
device), maximising EPS = BS / T_itr with Eq. (6)

    T_itr = T_RM^sample(i) + max(T_RM^insert(i), T_RM^update(i) + T_Learner(j))
            + T_comm(i→j) + T_comm(cpu→i) + T_comm(j→i)

(sampled indices and experiences RM → Learner; the actors' experiences host → RM; the new
priorities Learner → RM), the co-located column where i = j, ties broken by the least data
traffic (Fig. 8b). Step 2 puts the Experience Memory on the device of Learner, Actors or RM
with the least Σ C / bandwidth.

Where M comes from:

* a device with a `clock_hz` is a pipelined dataflow fabric (the FPGA): the RM by Eqs. (3)-(4)
  in cycles, 2F(BS + D) to sample and 2(BS + D) to update or insert (D = the tree's depth, F
  its fanout), the Learner by Eqs. (2) and (5): T_stage × (⌈BS/DP⌉ + 3(L − 1)) cycles, L the
  weight layers, the DSPs a design sustains (rate / 2·clock) balanced over the stages, DP
  data-parallel pipelines as many as fit them whole (spec D.2 #2-#4); cycles / clock;
* any other device by its roofline (hetrl.platform.model): the Learner is the step's task
  graph run serially on it, the RM's operations are batched tree walks (a sample reads F
  children on each of D levels per request, an update rewrites D ancestors);
* on `platform=host`, measured (`measured_matrix`): the Learner's step timed on each real
  device, the RM's operations on the project's sum tree where the host runs it, its CPU
  (`hetrl.replay.rm_timing`; no device else can host it).

Every transfer costs what the platform's links say (latency, runtime overhead per transfer,
bytes / bandwidth, two hops between accelerators through the host). Per Eq. (3) the RM's
sampling also takes its input (the host runtime's request) from the host. A transfer between
two primitives that both live on the host goes through the host runtime's queues (PEARL's
Python host thread): `host_runtime_s` per transfer. Inside one accelerator, none (on-chip
pipes).
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import product

import numpy as np

from hetrl.partition.costs import CostTable, Plan
from hetrl.partition.graph import TaskGraph
from hetrl.partition.primitives import (
    WORD,
    PrimitiveMatrix,
    TreeShape,
    measured_matrix,
    modeled_matrix,
)
from hetrl.partition.single import SinglePartitioner


RmTimer = Callable[[int, int, int, int], np.ndarray]
"""The RM's (sample, insert, update) seconds for a tree's capacity and fanout, a batch and an
insert batch (`hetrl.replay.rm_timing.rm_seconds` on the host)."""


def portability(eps: Sequence[float]) -> float:
    """Eq. (7): the harmonic mean of the EPS of every choice in H, 0 if any is 0 (a choice
    the implementation cannot run)."""
    eps = [float(e) for e in eps]
    if not eps or any(not e > 0 for e in eps):
        return 0.0
    return len(eps) / sum(1.0 / e for e in eps)


@dataclass
class Traffic:
    """What moves per iteration (bytes): BS sampled experiences and indices to the Learner,
    the insert batch of experiences from the actors, BS priorities back."""

    batch_size: int
    insert_batch: int
    experience_bytes: float  # E

    @property
    def sampled(self) -> float:
        return self.batch_size * (self.experience_bytes + WORD)

    @property
    def inserted(self) -> float:
        return self.insert_batch * self.experience_bytes

    @property
    def priorities(self) -> float:
        return self.batch_size * WORD


Transfer = Callable[[float, str, str], float]
"""(bytes, from device, to device) -> seconds of one transfer between primitives."""


@dataclass
class Candidate:
    rm: str
    learner: str
    t_itr: float
    eps: float
    traffic_s: float  # the three transfers' time: the tie-break


@dataclass
class Composition:
    """Algorithm 2's answer and everything it weighed."""

    assignment: dict[str, str]  # PEARL's JSON: {"DS": ..., "RM": ..., "Learner": ...}
    eps: float  # of the chosen pair
    t_itr: float
    candidates: list[Candidate]
    matrix: PrimitiveMatrix
    measured: bool = False
    phi_d: float = field(init=False)

    def __post_init__(self) -> None:
        self.phi_d = portability([c.eps for c in self.candidates])

    def to_json(self) -> str:
        return json.dumps(self.assignment)

    def grid(self) -> np.ndarray:
        """EPS of every candidate, rows = Learner device, columns = RM device (Fig. 8)."""
        index = {d: k for k, d in enumerate(self.matrix.devices)}
        out = np.zeros((len(index), len(index)))
        for c in self.candidates:
            out[index[c.learner], index[c.rm]] = c.eps
        return out

    def table(self) -> str:
        """Every candidate as CSV: RM device, Learner device, T_itr, EPS, traffic."""
        lines = ["rm,learner,t_itr_s,eps,traffic_s"]
        lines += [f"{c.rm},{c.learner},{c.t_itr:.6g},{c.eps:.6g},{c.traffic_s:.6g}"
                  for c in self.candidates]
        return "\n".join(lines) + "\n"

    def metrics(self) -> dict[str, float]:
        prefix = "host/" if self.measured else ""
        best = max((c.eps for c in self.candidates), default=0.0)
        metrics = {f"{prefix}composer/eps": self.eps, f"{prefix}composer/t_itr_s": self.t_itr,
                   f"{prefix}composer/eps_best": best, f"{prefix}phi_d": self.phi_d}
        if not self.measured:
            metrics["eps_platform"] = self.eps
        return metrics


def t_itr(m: PrimitiveMatrix, i: int, j: int, transfer: Transfer, traffic: Traffic,
          host: str) -> tuple[float, float]:
    """Eq. (6) for RM on device i and Learner on device j: (T_itr, the transfers' time)."""
    d = m.devices
    rm, learner = (m.rm_co[i], m.learner_co[j]) if i == j else (m.rm[i], m.learner[j])
    sample, insert, update = rm
    request = transfer(traffic.batch_size * WORD, host, d[i])  # Eq. (3)'s T_comm: the request
    comm = (transfer(traffic.sampled, d[i], d[j]) + transfer(traffic.inserted, host, d[i])
            + transfer(traffic.priorities, d[j], d[i]))
    return sample + request + max(insert, update + learner) + comm, comm + request


def compose(m: PrimitiveMatrix, transfer: Transfer, traffic: Traffic, host: str,
            bandwidth: Callable[[str, str], float], n_actors: int = 4,
            measured: bool = False) -> Composition:
    """Algorithm 2: step 1 over all N² (RM, Learner) pairs, argmax EPS, ties broken by the
    least traffic; step 2 the Exp Memory."""
    candidates = []
    for i, j in product(range(len(m.devices)), repeat=2):
        t, traffic_s = t_itr(m, i, j, transfer, traffic, host)
        eps = traffic.batch_size / t if math.isfinite(t) and t > 0 else 0.0
        candidates.append(Candidate(m.devices[i], m.devices[j], t, eps, traffic_s))
    best = min(candidates, key=lambda c: (-c.eps, c.traffic_s))  # first of equals: stable
    ds = exp_memory(best.rm, best.learner, host, traffic, bandwidth, n_actors)
    return Composition({"DS": ds, "RM": best.rm, "Learner": best.learner}, best.eps,
                       best.t_itr, candidates, m, measured)


def exp_memory(rm: str, learner: str, actors: str, traffic: Traffic,
               bandwidth: Callable[[str, str], float], n_actors: int) -> str:
    """Algorithm 2 step 2: the device among Learner's, Actors', RM's with the least
    Σ C / bandwidth (C_Learner = BS(E + 1) words, C_Actor = N_Actor·E, C_RM = BS; bytes)."""
    e = traffic.experience_bytes
    volumes = ((learner, traffic.batch_size * (e + WORD)), (actors, n_actors * e),
               (rm, traffic.batch_size * WORD))
    best, least = learner, math.inf
    for place in (learner, actors, rm):
        total = sum(volume / bandwidth(place, other) for other, volume in volumes)
        if total < least:
            best, least = place, total
    return best


def platform_transfer(platform) -> Transfer:
    """Transfers between primitives on a modeled platform: the links, and `host_runtime_s`
    between two primitives that both live on the host (the host runtime's queues)."""

    def transfer(nbytes: float, src: str, dst: str) -> float:
        if src == dst:
            return platform.host_runtime_s if src == platform.host else 0.0
        return platform.edge_seconds(nbytes, src, dst)

    return transfer


def platform_bandwidth(platform) -> Callable[[str, str], float]:
    """Bytes/s between two devices for Algorithm 2's step 2: the device's memory within it,
    the slowest link on the route across (a shared-memory link: the host's memory)."""

    def bandwidth(a: str, b: str) -> float:
        if a == b:
            return platform.specs[a].mem_bandwidth
        direct = [link for link in platform.links if set(link.between) == {a, b}]
        if direct:
            return direct[0].bandwidth
        return min(bandwidth(a, platform.host), bandwidth(platform.host, b))

    return bandwidth


class ComposerPartitioner:
    """`partitioner=composer`: Algorithm 2 places the RM and the Learner (`compose`), then
    the Learner's step goes whole onto the Learner's device (`partition`)."""

    def __init__(self, fanout: int, capacity: int | None, insert_batch: int | None,
                 n_actors: int) -> None:
        self.fanout, self.capacity = fanout, capacity
        self.insert_batch, self.n_actors = insert_batch, n_actors
        self.composition: Composition | None = None

    def traffic(self, batch_size: int, experience: float) -> Traffic:
        return Traffic(batch_size, self.insert_batch or batch_size, experience)

    def tree(self, buffer_size: int) -> TreeShape:
        return TreeShape(self.capacity or buffer_size, self.fanout)

    def compose(self, platform, graph: TaskGraph, batch_size: int, buffer_size: int,
                experience: float) -> Composition:
        traffic = self.traffic(batch_size, experience)
        m = modeled_matrix(platform, graph, batch_size, traffic.insert_batch,
                           self.tree(buffer_size), experience)
        self.composition = compose(m, platform_transfer(platform), traffic, platform.host,
                                   platform_bandwidth(platform), self.n_actors)
        return self.composition

    def compose_measured(self, costs: CostTable, batch_size: int, buffer_size: int,
                         experience: float, per_byte: float, time_rm: RmTimer) -> Composition:
        """Algorithm 2 on `platform=host`: the matrix measured on its devices (the RM timed
        by `time_rm(capacity, fanout, batch_size, insert_batch)` on the host's CPU),
        transfers at the host-device copy rate the host measured, `per_byte` seconds (none
        within a device)."""
        traffic, tree, host = self.traffic(batch_size, experience), self.tree(buffer_size), "cpu"
        m = measured_matrix(costs, time_rm(tree.capacity, tree.fanout, batch_size,
                                           traffic.insert_batch), host)

        def transfer(nbytes: float, src: str, dst: str) -> float:
            return 0.0 if src == dst else nbytes * per_byte

        def bandwidth(a: str, b: str) -> float:
            return math.inf if a == b or per_byte == 0 else 1.0 / per_byte

        self.composition = compose(m, transfer, traffic, host, bandwidth, self.n_actors,
                                   measured=True)
        return self.composition

    def partition(self, costs: CostTable) -> Plan:
        device = self.composition.assignment["Learner"] if self.composition else costs.devices[0]
        plan = SinglePartitioner(device).partition(costs)
        plan.method = f"composer:{device}"
        return plan
