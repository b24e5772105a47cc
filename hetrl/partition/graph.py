"""The task graph of one training step: a node per layer pass, edges carry bytes.

Byte counts are for float32 tensors; a platform scales them by the dtype it runs a node in.
FLOPs and bytes are for the whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from hetrl.config.enums import Kind


class Pass(str, Enum):
    forward = "forward"
    backward = "backward"
    update = "update"


@dataclass(frozen=True)
class Node:
    name: str  # unique, e.g. "q/0.forward" or "q_target/2.forward"
    network: str  # which network: "q", "q_target", "actor", "critic", ...
    layer: str  # the module's path inside its network, e.g. "0" or "net.2"
    pass_: Pass
    kind: Kind
    flops: float
    bytes_in: float
    bytes_out: float
    param_bytes: float

    @property
    def layer_pass(self) -> bool:
        """A layer's forward or backward pass: what computes in a layer's dtype (the loss
        and the optimizer's update nodes compute in float32)."""
        return self.kind is not Kind.loss and self.pass_ in (Pass.forward, Pass.backward)


@dataclass(frozen=True)
class Edge:
    src: int  # node index
    dst: int
    bytes: float


@dataclass
class TaskGraph:
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)

    def succs(self, i: int) -> list[int]:
        return [e.dst for e in self.edges if e.src == i]

    def topological_order(self) -> list[int]:
        indegree = [0] * len(self.nodes)
        for e in self.edges:
            indegree[e.dst] += 1
        ready = [i for i, d in enumerate(indegree) if d == 0]
        order: list[int] = []
        while ready:
            i = ready.pop(0)
            order.append(i)
            for j in self.succs(i):
                indegree[j] -= 1
                if indegree[j] == 0:
                    ready.append(j)
        if len(order) != len(self.nodes):
            raise ValueError("the task graph has a cycle")
        return order
