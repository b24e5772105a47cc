"""How a job ends other than by finishing, each told in one line: faults outside its config
that stop it (a torn checkpoint, a full disk, a tracking store that cannot be written), each
naming the file and what to do; and stops on request (Ctrl-C, SIGTERM), naming the command
that goes on. Light to import: `python -m hetrl` catches these before torch is loaded."""

from __future__ import annotations

import signal
import sys
import threading
from typing import Callable


class Fault(RuntimeError):
    """The job cannot go on for a reason outside its config; the message names the file and
    what to do."""


class StopRequest(threading.Event):
    """Set by a signal handler: the loop checkpoints and stops at its next step boundary.
    `signum` is the signal that asked (SIGINT for Ctrl-C, SIGTERM)."""

    signum: int = signal.SIGINT
    ctrl_cs: int = 0  # SIGINTs received

    def request(self, signum: int) -> None:
        """The first signal asks the stop (and names it); a later SIGINT is a second Ctrl-C,
        raised as KeyboardInterrupt: stop at once. A SIGTERM before it does not count as a
        Ctrl-C: a sweep's launching process sends one to its jobs when Ctrl-C reaches it, and
        may do so before the Ctrl-C reaches them."""
        if signum == signal.SIGINT:
            self.ctrl_cs += 1
            if self.ctrl_cs > 1:
                raise KeyboardInterrupt
        if not self.is_set():
            self.signum = signum
            self.set()


class Stopped(KeyboardInterrupt):
    """A stop on request (Ctrl-C, SIGTERM): the loop stopped at a step boundary after a
    checkpoint (`step`; `job_dir` holds it once the job knows where it is), or a sweep
    stopped between its jobs (`step` None)."""

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
            return (f"stopped by {name} between two jobs of the sweep; its parent run ends "
                    "KILLED, its summary lists the jobs that did not run")
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
        print("interrupted (a second Ctrl-C): the last checkpoint, if any, is where "
              "`resume=` goes on", file=sys.stderr)
        sys.exit(130)
