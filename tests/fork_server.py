"""A fork server for the tests' `python -m hetrl ...` and `python benchmarks/<name>.py ...`
runs (tests/forks.py starts one per test process): it imports what they share once (torch
with its compiler's front end, which an optimizer imports, MLflow, Hydra, gymnasium, hetrl: about
8 s of CPU a process on the project's 2-core hosts), then forks a child per run that runs as
`python <argv>` would, less those imports. The processes a run starts itself (a sweep's
workers, actors, servers) start as they always do.

A JSON line on stdin per run: {"argv", "cwd", "env", "out", "err", "timeout"} (argv as after
`python`: `-m module ...` or `script.py ...`; the child's stdout is appended to the file `out`,
its stderr to `err`, or with it where `err` is null). Two JSON lines on stdout: {"pid"} as it
starts (to signal it: it leads a session of its own, as `start_new_session=True` starts one), and
{"code": its exit code (negative: the signal that ended it), or null where it ran past
`timeout` seconds and was killed} once it ended."""

from __future__ import annotations

import gc
import importlib
import importlib.util
import json
import os
import runpy
import select
import signal
import sys
import threading
import time
from pathlib import Path
from typing import NoReturn

PRELOAD = ("torch", "torch._dynamo", "numpy", "gymnasium", "omegaconf", "hydra", "mlflow",
           "mlflow.store.tracking.sqlalchemy_store", "mlflow.pyfunc", "hetrl.build",
           "hetrl.experiment", "hetrl.sweep.stops", "hetrl.checks", "stable_baselines3")
"""Imported before the first fork (stable_baselines3 where installed: the `bench` extra)."""


def preload() -> dict[str, str]:
    """Import PRELOAD; a fork must find this process with one thread (a child of a process
    with others inherits their locks, held, and not the threads). Returns the environment
    variables the imports set (hetrl's TORCHINDUCTOR_CACHE_DIR, MLflow's), which a child keeps
    under its own environment, as a fresh process would set them again."""
    before = dict(os.environ)
    for name in PRELOAD:
        if importlib.util.find_spec(name.partition(".")[0]) is not None:
            importlib.import_module(name)
    assert threading.active_count() == 1, threading.enumerate()
    gc.collect()
    gc.freeze()  # the children's GC never scans what the imports made (nor copies its pages)
    return {key: value for key, value in os.environ.items() if before.get(key) != value}


def run(request: dict, imported_env: dict[str, str]) -> int | None:
    """The exit code of a child that runs `request`, or None where it ran past its timeout
    (killed then)."""
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        _child(request, imported_env)
    print(json.dumps({"pid": pid}), flush=True)
    deadline = time.monotonic() + request["timeout"]
    while not (done := os.waitpid(pid, os.WNOHANG))[0]:
        if time.monotonic() > deadline or orphaned():
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.05)
    return os.waitstatus_to_exitcode(done[1])


def _child(request: dict, imported_env: dict[str, str]) -> NoReturn:
    """Become `python <argv>` run in `cwd` with `env` (and what the imports set where it sets
    nothing), in a session of its own: a script runs as `__main__` with its folder first on
    sys.path, a module (`-m`) with `cwd` first, the entries of the env's PYTHONPATH next; its
    SystemExit or exception ends this process as it would end that one."""
    os.setsid()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update({**imported_env, **request["env"]})
    out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    err = out if request["err"] is None else os.open(request["err"],
                                                     os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    for fd, opened in ((0, os.open(os.devnull, os.O_RDONLY)), (1, out), (2, err)):
        os.dup2(opened, fd)
    for opened in {out, err}:
        os.close(opened)
    argv = request["argv"]
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]  # runpy sets argv[0] to the module's file
        sys.path[:1] = [os.getcwd(), *extra]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        sys.path[:1] = [str(Path(argv[0]).resolve().parent), *extra]
        runpy.run_path(argv[0], run_name="__main__")
    sys.exit(0)


PARENT = os.getppid()


def orphaned() -> bool:
    """Whether the test process that started this server is gone (its end may not close the
    server's stdin: a process it forked can hold the pipe on)."""
    return os.getppid() != PARENT


def main() -> None:
    imported_env = preload()
    while not orphaned():
        # one request at a time (the next comes after this one's exit code): none is buffered
        if select.select([sys.stdin], [], [], 1.0)[0]:
            if not (line := sys.stdin.readline()):
                return
            print(json.dumps({"code": run(json.loads(line), imported_env)}), flush=True)


if __name__ == "__main__":
    main()
