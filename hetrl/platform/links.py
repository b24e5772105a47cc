"""Transfer times over a modeled platform's links, routed through other devices when needed."""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Iterable

from hetrl.config.platform import LinkSpec


def hop_seconds(link: LinkSpec, nbytes: float) -> float:
    """One transfer over one link: nothing in shared memory, else latency + runtime + bytes/BW."""
    if link.shared_memory:
        return 0.0
    return link.latency_s + link.runtime_overhead_s + nbytes / link.bandwidth


class LinkNetwork:
    """Symmetric links between devices. A pair without a direct link takes the fastest chain
    of hops, each a full store-and-forward transfer (on `versal`, PS -> PL -> AIE)."""

    def __init__(self, links: Iterable[LinkSpec]) -> None:
        self._next: dict[str, list[tuple[str, LinkSpec]]] = defaultdict(list)
        for link in links:
            a, b = link.between
            self._next[a].append((b, link))
            self._next[b].append((a, link))

    def seconds(self, nbytes: float, src: str, dst: str) -> float:
        """Transfer time of `nbytes` from src to dst (0 on the same device); Dijkstra."""
        best = {src: 0.0}
        queue = [(0.0, src)]
        while queue:
            t, here = heapq.heappop(queue)
            if here == dst:
                return t
            if t > best[here]:
                continue
            for there, link in self._next[here]:
                arrive = t + hop_seconds(link, nbytes)
                if arrive < best.get(there, math.inf):
                    best[there] = arrive
                    heapq.heappush(queue, (arrive, there))
        raise ValueError(f"no route from device {src!r} to {dst!r}")
