"""Phase timing: the wall time each named phase of a loop, an actor or an update took."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from time import perf_counter

import torch


class PhaseTimer:
    """`with timer("act"): ...` adds the block's wall time to `totals["act"]`; inside a
    compiled update (MADDPG's losses time their phases), nothing: there the update is one
    phase, timed by the loop."""

    def __init__(self, totals: dict[str, float]) -> None:
        self.totals = totals
        self._name = ""
        self._start = 0.0

    def __call__(self, name: str) -> AbstractContextManager:
        if torch.compiler.is_compiling():
            return nullcontext()
        self._name = name
        return self

    def __enter__(self) -> None:
        self._start = perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.totals[self._name] = self.totals.get(self._name, 0.0) + perf_counter() - self._start
