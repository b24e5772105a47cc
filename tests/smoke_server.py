"""A fork server for the benchmarks' `--smoke` runs (tests/test_benchmarks.py): started once
per test process, it imports what the benchmarks import (torch with its compiler's front end,
which an optimizer imports, MLflow, Hydra, gymnasium, hetrl: about 8 s of CPU a process on the
project's 2-core hosts), then forks a child per run that runs the script as
`python benchmarks/<name>.py --smoke ...` runs it, less those imports. The processes a
benchmark starts itself (its sweeps, workers, servers) start as they always do.

A JSON line on stdin per run: {"argv", "cwd", "env", "out", "err", "timeout"} (the child's
stdout and stderr go to the files `out` and `err`); two JSON lines on stdout: {"pid"} as it
starts (to signal it), {"code": its exit code (negative: the signal that ended it), or null
where it ran past `timeout` seconds and was killed} once it ended."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import runpy
import signal
import sys
import threading
import time
from pathlib import Path
from typing import NoReturn

PRELOAD = ("torch", "torch._dynamo", "numpy", "gymnasium", "omegaconf", "hydra", "mlflow",
           "mlflow.store.tracking.sqlalchemy_store", "mlflow.pyfunc", "hetrl.build",
           "hetrl.experiment", "stable_baselines3")
"""Imported before the first fork (stable_baselines3 where installed: the `bench` extra)."""


def preload() -> None:
    """Import PRELOAD; a fork must find this process with one thread (a child of a process
    with others inherits their locks, held, and not the threads)."""
    for name in PRELOAD:
        if importlib.util.find_spec(name.partition(".")[0]) is not None:
            importlib.import_module(name)
    assert threading.active_count() == 1, threading.enumerate()


def run(request: dict) -> int | None:
    """The exit code of a child that runs `request`, or None where it ran past its timeout
    (killed then)."""
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        _child(request)
    print(json.dumps({"pid": pid}), flush=True)
    deadline = time.monotonic() + request["timeout"]
    while not (done := os.waitpid(pid, os.WNOHANG))[0]:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.05)
    return os.waitstatus_to_exitcode(done[1])


def _child(request: dict) -> NoReturn:
    """Become `python <argv>` run in `cwd` with `env`: the script runs as `__main__` with its
    folder first on sys.path, and its SystemExit or exception ends this process as it would
    end that one."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                            (1, request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    sys.argv = request["argv"]
    sys.path[0] = str(Path(sys.argv[0]).resolve().parent)
    runpy.run_path(sys.argv[0], run_name="__main__")
    sys.exit(0)


def main() -> None:
    preload()
    for line in sys.stdin:
        print(json.dumps({"code": run(json.loads(line))}), flush=True)


if __name__ == "__main__":
    main()
