"""The trainers' reads of MiniGo's window (`hetrl.replay.window`): a loader that reads the
next batch on a background thread while the update step trains on the current one."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Iterator

from hetrl.algos.alphazero import PositionBatch
from hetrl.replay.window import GenerationWindow


class WindowLoader:
    """What the update step samples (`Updates.step` calls `sample`): inside `reading(count)`
    each `sample(n)` returns a batch read ahead, and has the next one read on a worker thread
    while the caller trains, until `count` batches are taken; outside it, a direct read.

    The rows are drawn in the caller's thread, each batch's when it is handed to the worker,
    so the window's generator draws what direct reads draw, in their order, and no more:
    the same seed gives the same batches, and the draws after training (gating, evaluation)
    are the same. Only the copying of the rows out of the window runs ahead. A pass reads
    batches of one size: the `n` of its first `sample`."""

    def __init__(self, window: GenerationWindow) -> None:
        self.window = window
        self._pool: ThreadPoolExecutor | None = None
        self._ahead: Future[PositionBatch] | None = None
        self._left = 0  # batches of the pass not yet handed to the worker

    @contextmanager
    def reading(self, count: int) -> Iterator[None]:
        """A pass of `count` batches read one ahead (the worker thread lives as long)."""
        with ThreadPoolExecutor(1, thread_name_prefix="window-loader") as pool:
            self._pool, self._left = pool, count
            try:
                yield
            finally:
                self._pool, self._ahead, self._left = None, None, 0

    def sample(self, n: int) -> PositionBatch:
        """The pass's next batch of min(n, positions) rows (the window's `sample` outside a
        pass)."""
        if self._pool is None:
            return self.window.sample(n)
        if self._ahead is None:  # the pass's first batch: nothing read ahead yet
            self._ahead = self._read(n)
        batch = self._ahead.result()
        self._ahead = self._read(n) if self._left > 0 else None
        return batch

    def _read(self, n: int) -> Future[PositionBatch]:
        """Draw a batch's rows here, and read them on the worker."""
        self._left -= 1
        return self._pool.submit(self.window.read, self.window.draw(n))
