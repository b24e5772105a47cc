"""What test_selfplay_stops runs in a joblib worker, in a module of its own: the worker
imports it by name, and this one keeps torch and MLflow (the test module's imports) out of
the worker."""

from __future__ import annotations

import multiprocessing as mp
import time
from contextlib import nullcontext

from hetrl.actors.workers import starting


def start_a_spawned_child(guarded: bool) -> tuple[int | None, str | None]:
    """In a joblib worker: start a spawned child, as the self-play pool does, and wait for
    it; its exit code and the worker's start method afterwards."""
    child = mp.get_context("spawn").Process(target=time.sleep, args=(0,))
    with starting("spawn") if guarded else nullcontext():
        child.start()
    child.join(60)
    return child.exitcode, mp.get_start_method(allow_none=True)
