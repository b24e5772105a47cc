"""How a job ends other than by finishing, each told in one line: faults outside its config
that stop it (a torn checkpoint, a full disk, a tracking store that cannot be written), each
naming the file and what to do; and stops on request (Ctrl-C, SIGTERM), naming the command
that goes on. Light to import: `python -m hetrl` catches these before torch is loaded."""

from __future__ import annotations

import signal
import sys
import time
from typing import Callable


class Fault(RuntimeError):
    """The job cannot go on for a reason outside its config; the message names the file and
    what to do."""


class StoreLost(Fault):
    """The job's tracking store vanished or was replaced while it ran."""


class WorkerLost(Fault):
    """A worker process or actor died or stopped answering; the message names it (rank,
    pid, how it ended) and what to do."""


def exit_words(code: int | None) -> str:
    """How a process ended, from its exit code (negative: the signal that killed it)."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class StopRequest:
    """A stop asked by a signal (SIGINT for Ctrl-C, SIGTERM): the loop checkpoints and stops
    at its next step boundary; every wait polls it (`is_set`, `wait`).

    `request` is the signal handler, and does nothing but note which signal came: a handler
    runs between two bytecodes of the main thread, wherever that is, so it takes no lock (a
    `threading.Event.set` there deadlocked on the lock its interrupted first call held),
    logs nothing and raises nothing (an exception lands in whatever code it interrupted:
    a weakref callback swallowed one, schema creation died of another). A list's append is
    one bytecode and lock-free; a second, doubled or forwarded signal only lengthens it."""

    def __init__(self) -> None:
        self.signals: list[int] = []  # every signal received, first first

    def request(self, signum: int, frame: object = None) -> None:
        self.signals.append(signum)

    def set(self, signum: int = signal.SIGINT) -> None:
        """Ask the stop from code (as a signal would)."""
        self.signals.append(signum)

    def is_set(self) -> bool:
        return bool(self.signals)

    @property
    def signum(self) -> int:
        """The signal that asked first (SIGINT when none has)."""
        return self.signals[0] if self.signals else signal.SIGINT

    def wait(self, timeout: float | None = None) -> bool:
        """Until the stop is asked or `timeout` s passed (polled: no lock to take)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.signals:
            left = 0.02 if deadline is None else min(0.02, deadline - time.monotonic())
            if left <= 0:
                break
            time.sleep(left)
        return bool(self.signals)


class Stopped(KeyboardInterrupt):
    """A stop on request (Ctrl-C, SIGTERM): the loop stopped at a step boundary after a
    checkpoint (`step`; `job_dir` holds it once the job knows where it is), or before the
    job's run opened (`step` None)."""

    def __init__(self, signum: int, step: int | None = None, job_dir: str | None = None) -> None:
        super().__init__(signum, step)
        self.signum, self.step, self.job_dir = signum, step, job_dir

    def __str__(self) -> str:
        return self.describe()

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's code for a death by that signal: 130, 143

    def describe(self, go_on: str | None = None) -> str:
        """One line: what stopped, where, and the command that goes on (`go_on`; by default
        the job's `resume=`)."""
        name = signal.Signals(self.signum).name
        if self.step is None:
            return f"stopped by {name} before the job's run opened: nothing of it was recorded"
        text = f"stopped at step {self.step} by {name}, after a checkpoint"
        if go_on is None and self.job_dir is not None:
            go_on = f"python -m hetrl resume={self.job_dir}"
        return text if go_on is None else f"{text}; go on with: {go_on}"


def exit_on_stop(main: Callable[[], object], go_on: str | None = None) -> None:
    """Run `main`; a stop by Ctrl-C or SIGTERM exits 130 or 143 with one line saying how to go
    on (`go_on`, where the stopped job's `resume=` is not the way), not a traceback."""
    try:
        main()
    except Stopped as stopped:
        print(stopped.describe(go_on), file=sys.stderr)
        sys.exit(stopped.exit_code)
    except KeyboardInterrupt:
        print("interrupted by Ctrl-C outside a job's loop (while starting or ending): no run "
              "is left open; the last checkpoint, if any, is where `resume=` goes on",
              file=sys.stderr)
        sys.exit(130)
