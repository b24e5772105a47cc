"""M of PEARL's Algorithm 2 (specs/ap-drl-pearl.md §B.2.7-B.2.9), the Primitive Device
Assignment Matrix: per device, the Replay Manager's three operations on a sum tree and the
Learner's step, alone and co-located; modeled from a platform (`modeled_matrix`) or measured
on this host (`measured_matrix`: the Learner on each device, the RM as the host's CPU runs it). hetrl.partition.composer places the primitives
from it."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hetrl.config.enums import DType
from hetrl.partition.costs import CostTable
from hetrl.partition.graph import Kind, Pass, TaskGraph

RM_OPS = ("sample", "insert", "update")
WORD = 4  # bytes of an index, a priority or a float32 experience field


@dataclass
class PrimitiveMatrix:
    """M of Algorithm 2: per device, the RM's three operations and the Learner's step, alone
    and co-located (seconds per iteration; inf where the device cannot host it)."""

    devices: list[str]
    rm: np.ndarray  # (N, 3): sample, insert, update; the RM alone on the device
    learner: np.ndarray  # (N,)
    rm_co: np.ndarray  # (N, 3): the RM sharing the device with the Learner
    learner_co: np.ndarray  # (N,)

    def rows(self) -> list[dict[str, float]]:
        """The matrix as PEARL's PT.csv columns, one row per device."""
        out = []
        for k, device in enumerate(self.devices):
            row = {"device": device}
            row.update({f"RP-{op}": float(self.rm[k, o]) for o, op in enumerate(RM_OPS)})
            row["LN"] = float(self.learner[k])
            row.update({f"RPLN-RP-{op}": float(self.rm_co[k, o]) for o, op in enumerate(RM_OPS)})
            row["RPLN-LN"] = float(self.learner_co[k])
            out.append(row)
        return out


# ---- the matrix from a modeled platform -------------------------------------------------


@dataclass(frozen=True)
class TreeShape:
    capacity: int
    fanout: int

    @property
    def depth(self) -> int:
        return max(1, math.ceil(math.log(self.capacity, self.fanout) - 1e-12))

    @property
    def nodes(self) -> int:
        return sum(self.fanout ** level for level in range(self.depth + 1))


def weight_layers(graph: TaskGraph) -> int:
    """PEARL's #layers (spec D.2 #3: weight layers): the trained weight layers' updates."""
    return max(1, sum(n.pass_ is Pass.update for n in graph.nodes))


def macs_per_sample(graph: TaskGraph, batch_size: int) -> float:
    return sum(n.flops for n in graph.nodes if n.kind is Kind.matmul) / (2.0 * batch_size)


def fpga_learner_cycles(macs: float, layers: int, batch_size: int, dsps: float) -> float:
    """Eqs. (2) and (5): DP pipelines, each as many MACs per cycle as the DSPs it gets; the
    stage time balanced, T_stage = ⌈#MAC·DP / #DSP⌉ ≥ 1 cycle (UF_s ≤ #MAC_s); DP the most
    that still unrolls a whole pipeline (T_stage = 1), else 1 (spec D.2 #3)."""
    dp = int(max(1, min(batch_size, dsps // max(macs, 1.0))))
    t_stage = max(1.0, math.ceil(macs * dp / dsps))
    return t_stage * (math.ceil(batch_size / dp) + 3 * (layers - 1))


def fpga_rm_cycles(op: str, batch: int, tree: TreeShape) -> float:
    """Eqs. (3)-(4) in cycles: sampling scans F children per level, update/insert one node."""
    if op == "sample":
        return 2 * tree.fanout * (batch + tree.depth)
    return 2 * (batch + tree.depth)


def roofline_rm_seconds(op: str, batch: int, tree: TreeShape, rate: float,
                        mem_bandwidth: float, launch_s: float, experience_bytes: float) -> float:
    """A batched tree walk on a CPU or GPU: sampling reads (and adds) F children per level
    per request; an update reads and writes D ancestors; an insert is a retrieval, an update
    and the experiences' write to Exp Memory. Memory-bound, as Fig. 1 has it."""
    d, f = tree.depth, tree.fanout
    if op == "sample":
        flops, nbytes = 2.0 * batch * d * f, WORD * batch * d * f
    else:
        flops, nbytes = 2.0 * batch * d, 2 * WORD * batch * (d + 1)
        if op == "insert":
            nbytes += batch * experience_bytes
    return launch_s + max(flops / rate, nbytes / mem_bandwidth)


def tree_bytes(tree: TreeShape) -> float:
    return float(WORD * tree.nodes)


def modeled_matrix(platform, graph: TaskGraph, batch_size: int, insert_batch: int,
                   tree: TreeShape, experience_bytes: float) -> PrimitiveMatrix:
    """M from the platform model (see the module's docstring); co-location on a dataflow
    device only where the tree and the Learner's weights, gradients and moments fit on chip
    (`sram_bytes`), else that column is inf."""
    names = platform.devices
    rm = np.zeros((len(names), 3))
    learner = np.zeros(len(names))
    co_ok = np.ones(len(names), dtype=bool)
    params = sum(n.param_bytes for n in graph.nodes if n.pass_ is Pass.update)
    macs, layers = macs_per_sample(graph, batch_size), weight_layers(graph)
    for k, name in enumerate(names):
        spec = platform.specs[name]
        rate = spec.rates.get(DType.float32) or max(spec.rates.values())
        if spec.clock_hz:
            dsps = rate / (2.0 * spec.clock_hz)  # the DSPs a design sustains at that rate
            learner[k] = spec.launch_s + fpga_learner_cycles(macs, layers, batch_size,
                                                             dsps) / spec.clock_hz
            for o, op in enumerate(RM_OPS):
                batch = insert_batch if op == "insert" else batch_size
                rm[k, o] = spec.launch_s + fpga_rm_cycles(op, batch, tree) / spec.clock_hz
            if spec.sram_bytes is not None:
                co_ok[k] = tree_bytes(tree) + 4 * params <= spec.sram_bytes
        else:
            learner[k] = sum(platform.node_seconds(n, name, "float32") for n in graph.nodes)
            for o, op in enumerate(RM_OPS):
                batch = insert_batch if op == "insert" else batch_size
                rm[k, o] = roofline_rm_seconds(op, batch, tree, rate, spec.mem_bandwidth,
                                               spec.launch_s, experience_bytes)
    rm_co = np.where(co_ok[:, None], rm, np.inf)
    learner_co = np.where(co_ok, learner, np.inf)
    return PrimitiveMatrix(list(names), rm, learner, rm_co, learner_co)


def experience_bytes(obs_dim: int, act_dim: int) -> float:
    """E = (2|S| + |A| + 2) words: s, a, r, s', done (spec D.2 #9)."""
    return float((2 * obs_dim + act_dim + 2) * WORD)


# ---- the matrix measured on this host -----------------------------------------------------


def measured_matrix(costs: CostTable, rm_cpu: np.ndarray, host: str) -> PrimitiveMatrix:
    """M on `platform=host`: the Learner's step as its nodes measured on each device sum;
    the RM's operations (`rm_cpu`: sample, insert, update) as timed on the host's CPU
    (`host`), the only device the project's replay manager runs on (inf elsewhere);
    co-located: the same, one device."""
    learner = np.asarray(costs.seconds, dtype=float).sum(axis=0)
    rm = np.array([rm_cpu if d == host else np.full(3, np.inf) for d in costs.devices],
                  dtype=float)
    return PrimitiveMatrix(list(costs.devices), rm, learner, rm.copy(), learner.copy())
