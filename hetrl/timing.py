"""Phase timing: the wall time each named phase of a loop, an actor or an update took."""

from __future__ import annotations

from time import perf_counter


class PhaseTimer:
    """`with timer("act"): ...` adds the block's wall time to `totals["act"]`."""

    def __init__(self, totals: dict[str, float]) -> None:
        self.totals = totals
        self._name = ""
        self._start = 0.0

    def __call__(self, name: str) -> PhaseTimer:
        self._name = name
        return self

    def __enter__(self) -> None:
        self._start = perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.totals[self._name] = self.totals.get(self._name, 0.0) + perf_counter() - self._start
