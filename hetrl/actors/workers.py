"""Worker processes fed through task queues (self-play workers, data-parallel trainer ranks)."""

from __future__ import annotations

from typing import Any, Sequence


def stop_workers(inboxes: Sequence[Any], processes: Sequence[Any], timeout: float = 10.0) -> None:
    """Ask each worker to stop (None on its inbox: it ends its loop), then terminate those
    still running `timeout` seconds later."""
    for inbox in inboxes:
        inbox.put(None)
    for process in processes:
        process.join(timeout=timeout)
        if process.is_alive():
            process.terminate()
