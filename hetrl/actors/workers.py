"""Worker processes fed through task queues (self-play workers, data-parallel trainer ranks):
their stop, and the words for one that died or stopped answering."""

from __future__ import annotations

import gc
import multiprocessing as mp
import queue
import signal
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from hetrl.actors.worker_logs import look_in, said
from hetrl.faults import WorkerLost, exit_words
from hetrl.stopping import block

POLL_S = 0.5  # a wait on workers looks at the stop request, their health and its timeout this often


@contextmanager
def starting(method: str) -> Iterator[None]:
    """Processes of the context `method` start within the block. A spawned (or forkserver)
    child first sets its parent's process-wide start method as its own, and one that a
    library set there is unknown to the child: in a joblib worker it is loky's ('cannot find
    context for 'loky'', the child exits 1). For the block, that method is `method`.

    SIGINT is blocked meanwhile: the children start with it blocked until they ignore it
    (`leave_stops_to_the_job`), so a Ctrl-C to the group during their imports cannot kill one
    with a traceback; this process gets it when the block ends.

    A forked child inherits this process's heap with the objects frozen (`gc.freeze`, as
    CPython's docs advise before a fork): its collections never walk them, which would copy
    every page they lie on (the job's imports: hundreds of MB) into each child. A heap that
    something else froze (a pre-fork server, a test process) stays as it was, frozen."""
    previous = mp.get_start_method(allow_none=True)
    switch = (method != "fork" and previous is not None
              and previous not in mp.get_all_start_methods())
    mask = block({signal.SIGINT})
    if switch:
        mp.set_start_method(method, force=True)
    freezes = method == "fork" and gc.get_freeze_count() == 0
    if freezes:
        gc.freeze()
    try:
        yield
    finally:
        if freezes:
            gc.unfreeze()
        if switch:
            mp.set_start_method(previous, force=True)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def leave_stops_to_the_job() -> None:
    """A worker process's first step: it ignores Ctrl-C, which reaches the whole process group,
    as the job that started it stops it; SIGTERM ends it at once (a forked worker would
    otherwise run the job's stop handler)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked by `starting`


def stop_workers(inboxes: Sequence[Any], processes: Sequence[Any], timeout: float = 10.0) -> None:
    """Ask each worker to stop (None on its inbox: it ends its loop), then terminate those
    still running `timeout` seconds later (one deadline for all), and reap them. A stopped
    worker (SIGSTOP) could answer nothing and takes no signal but SIGKILL: it is killed at
    once."""
    for process in processes:
        if process_state(process.pid) == "stopped":
            process.kill()
    for inbox in inboxes:
        inbox.put(None)
    deadline = time.monotonic() + timeout
    for process in processes:
        process.join(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.terminate()
            process.join(timeout=5)


def check_alive(processes: Sequence[Any], what: str, first_rank: int = 0,
                logs: Sequence[Path | None] = ()) -> None:
    """Raise WorkerLost naming each of `processes` (rank, pid, how it ended, the last line of
    its log where `logs` has one) that is dead."""
    logs = list(logs) or [None] * len(processes)
    dead = [f"{rank} (pid {p.pid}, {exit_words(p.exitcode)}{said(log)})"
            for (rank, p), log in zip(enumerate(processes, first_rank), logs) if not p.is_alive()]
    if dead:
        raise WorkerLost(
            f"{what} {', '.join(dead)} died: the run stops, its last checkpoint is where "
            f"resume= goes on ({look_in(logs)}SIGKILL is often the kernel's OOM killer: give "
            "fewer workers or more memory)")


def named(rank: int, process: Any, log: Path | None = None) -> str:
    """A worker as a message names it: rank, pid and the last line of its log, if any."""
    return f"{rank} (pid {process.pid}{said(log)})"


def hung(what: str, silent: Sequence[str], waited_s: float, key: str | None = None) -> WorkerLost:
    """The error of workers (`silent`: rank and pid) that sent nothing for `waited_s` (the
    value of `key`, where a key sets it)."""
    by = f" ({key})" if key else ""
    advice = f" (raise {key} if its work takes that long)" if key else ""
    return WorkerLost(
        f"{what} {', '.join(silent)} sent nothing in {waited_s:.0f} s{by}: it hangs; the run "
        f"stops, its last checkpoint is where resume= goes on{advice}")


def next_answer(answers: Any, processes: Sequence[Any], what: str, timeout_s: float,
                first_rank: int = 0, logs: Sequence[Path | None] = ()) -> Any:
    """The next item on the queue `answers`, polled every POLL_S: a dead worker raises
    WorkerLost naming it at once, none for `timeout_s` names them all (with the last line
    of each one's log, where `logs` has one)."""
    logs = list(logs) or [None] * len(processes)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return answers.get(timeout=POLL_S)
        except queue.Empty:
            check_alive(processes, what, first_rank, logs)
            if time.monotonic() > deadline:
                names = [named(r, p, log)
                         for (r, p), log in zip(enumerate(processes, first_rank), logs)]
                raise hung(what, names, timeout_s) from None


def process_state(pid: int | None) -> str:
    """A process's state as Linux tells it (stopped, sleeping, ...), where it does."""
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "state unknown"
    return {"T": "stopped", "t": "stopped by a tracer", "S": "sleeping", "R": "running",
            "D": "in uninterruptible sleep", "Z": "a zombie"}.get(state, f"state {state}")
