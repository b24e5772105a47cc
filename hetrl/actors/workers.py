"""Worker processes fed through task queues (self-play workers, data-parallel trainer ranks):
their stop, and the words for one that died or stopped answering."""

from __future__ import annotations

import queue
import time
from typing import Any, Sequence

from hetrl.faults import WorkerLost, exit_words

POLL_S = 0.5  # a wait on workers looks at the stop request, their health and its timeout this often


def stop_workers(inboxes: Sequence[Any], processes: Sequence[Any], timeout: float = 10.0) -> None:
    """Ask each worker to stop (None on its inbox: it ends its loop), then terminate those
    still running `timeout` seconds later (one deadline for all), and reap them."""
    for inbox in inboxes:
        inbox.put(None)
    deadline = time.monotonic() + timeout
    for process in processes:
        process.join(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.terminate()
            process.join(timeout=5)


def check_alive(processes: Sequence[Any], what: str, first_rank: int = 0) -> None:
    """Raise WorkerLost naming each of `processes` (rank, pid, how it ended) that is dead."""
    dead = [f"{rank} (pid {p.pid}, {exit_words(p.exitcode)})"
            for rank, p in enumerate(processes, first_rank) if not p.is_alive()]
    if dead:
        raise WorkerLost(
            f"{what} {', '.join(dead)} died: the run stops, its last checkpoint is where "
            "resume= goes on (its last words, if any, are in the job's log above; SIGKILL is "
            "often the kernel's OOM killer: give fewer workers or more memory)")


def hung(what: str, silent: Sequence[str], waited_s: float, key: str | None = None) -> WorkerLost:
    """The error of workers (`silent`: rank and pid) that sent nothing for `waited_s` (the
    value of `key`, where a key sets it)."""
    by = f" ({key})" if key else ""
    advice = f" (raise {key} if its work takes that long)" if key else ""
    return WorkerLost(
        f"{what} {', '.join(silent)} sent nothing in {waited_s:.0f} s{by}: it hangs; the run "
        f"stops, its last checkpoint is where resume= goes on{advice}")


def next_answer(answers: Any, processes: Sequence[Any], what: str, timeout_s: float,
                first_rank: int = 0) -> Any:
    """The next item on the queue `answers`, polled every POLL_S: a dead worker raises
    WorkerLost naming it at once, none for `timeout_s` names them all."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return answers.get(timeout=POLL_S)
        except queue.Empty:
            check_alive(processes, what, first_rank)
            if time.monotonic() > deadline:
                names = [f"{r} (pid {p.pid})" for r, p in enumerate(processes, first_rank)]
                raise hung(what, names, timeout_s) from None
