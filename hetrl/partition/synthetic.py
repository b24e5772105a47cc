"""Random cost tables on random layered DAGs, for the partitioner tests and benchmarks.

They stand in for a platform: the partitioners only ever see a `CostTable`.
"""

from __future__ import annotations

import numpy as np

from hetrl.partition.costs import CostTable
from hetrl.partition.graph import Edge, Kind, Node, Pass, TaskGraph

US = 1e-6  # seconds per microsecond


def random_dag(rng: np.random.Generator, n_nodes: int, width: int = 3) -> TaskGraph:
    """Layers of 1..`width` nodes; each node after the first layer has 1 or 2 predecessors
    in the layer before it and, with probability 0.2, one more in any earlier layer."""
    layers: list[list[int]] = []
    while sum(map(len, layers)) < n_nodes:
        first = sum(map(len, layers))
        size = min(int(rng.integers(1, width + 1)), n_nodes - first)
        layers.append(list(range(first, first + size)))
    edges: set[tuple[int, int]] = set()
    for depth, layer in enumerate(layers[1:], start=1):
        earlier = [i for previous in layers[: depth - 1] for i in previous]
        for j in layer:
            k = min(int(rng.integers(1, 3)), len(layers[depth - 1]))
            edges.update((int(i), j) for i in rng.choice(layers[depth - 1], k, replace=False))
            if earlier and rng.random() < 0.2:
                edges.add((int(rng.choice(earlier)), j))
    nodes = [Node(name=f"n{i}", network="synthetic", layer=str(i), pass_=Pass.forward,
                  kind=Kind.matmul, flops=0.0, bytes_in=0.0, bytes_out=0.0, param_bytes=0.0)
             for i in range(n_nodes)]
    return TaskGraph(nodes, [Edge(i, j, float(rng.integers(1, 1 << 16))) for i, j in sorted(edges)])


def random_costs(rng: np.random.Generator, n_nodes: int, n_devices: int = 3, width: int = 3,
                 forbid_p: float = 0.2, tightness: float = 0.6) -> CostTable:
    """A cost table with t ∈ [1, 100] µs and comm ∈ [0, 30] µs (0 on one device).

    Device 0 takes every node and uses no resource, so a feasible assignment always exists.
    Every other device refuses a node with probability `forbid_p` (seconds = inf). There are two
    resources, "dsp" and "tiles": a node on any device but 0 takes some of both (as an AIE node
    takes PL LUTs), each with capacity `tightness` × all nodes' use on the device where that
    is largest.
    """
    graph = random_dag(rng, n_nodes, width)
    seconds = rng.uniform(1, 100, (n_nodes, n_devices)) * US
    seconds[:, 1:][rng.random((n_nodes, n_devices - 1)) < forbid_p] = np.inf
    comm = rng.uniform(0, 30, (len(graph.edges), n_devices, n_devices)) * US
    comm[:, range(n_devices), range(n_devices)] = 0.0
    usage, capacity = {}, {}
    for resource in ("dsp", "tiles"):
        usage[resource] = rng.uniform(0, 10, (n_nodes, n_devices))
        usage[resource][:, 0] = 0.0
        capacity[resource] = tightness * float(usage[resource].sum(axis=0).max())
    return CostTable(graph, [f"d{k}" for k in range(n_devices)], seconds, comm, usage, capacity)
