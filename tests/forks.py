"""Runs of `python -m ...` and `python <script>` forked by the fork server (tests/fork_server.py,
one per test process, started at the first run): what `subprocess.run` and `subprocess.Popen`
would start, less the ~8 s of CPU each spends importing torch, MLflow and hetrl."""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path


BEGUN_WITH = dict(os.environ)
"""The environment the test process began with (this module is imported as tests are
collected)."""


class _Server:
    """tests/fork_server.py and the lines it answers, read as they come (unbuffered: a line
    left in a buffer would hide from `select`). It starts in BEGUN_WITH, not in the environment
    of the test that happens to start it: one that had set PYTHONPATH (test_extending's
    examples) left its modules importable and its Hydra plugins loaded in every later run, whose
    submitit jobs then pickled the examples' schemas for tasks that cannot import them."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("fork_server.py"))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, env=BEGUN_WITH)
        self.read = b""
        self.running: Forked | None = None
        atexit.register(self.process.kill)  # idle then: its runs were waited for

    def start(self, request: dict) -> int:
        """The pid of the run `request` asks for (see fork_server's docstring)."""
        self.process.stdin.write(json.dumps(request).encode() + b"\n")
        return self.reply(None)["pid"]

    def reply(self, timeout: float | None) -> dict | None:
        """The server's next line, or None where none came within `timeout` seconds."""
        while b"\n" not in self.read:
            if not select.select([self.process.stdout], [], [], timeout)[0]:
                return None
            chunk = os.read(self.process.stdout.fileno(), 4096)
            assert chunk, f"the fork server ended (exit {self.process.wait()})"
            self.read += chunk
        line, _, self.read = self.read.partition(b"\n")
        return json.loads(line)


_server: _Server | None = None


class Forked:
    """A run the fork server started, as `subprocess.Popen(..., start_new_session=True)` would
    have started it: `pid` leads a session of its own; `poll`, `wait`, `send_signal`, `kill`
    and `returncode` as Popen's; its stdout goes to `out` (made empty), its stderr to `err`, or
    with it. The server runs one at a time; it kills a run that goes past
    `timeout` seconds (`timed_out`)."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str], out: Path,
                 err: Path | None = None, timeout: float = 900) -> None:
        global _server
        if _server is None:
            _server = _Server()
        if _server.running is not None:  # one run at a time: one killed may still be ending
            _server.running.wait(timeout=60)
        for path in {out, err} - {None}:  # there, empty, once the pid is known
            path.write_bytes(b"")
        self.args = argv
        self.returncode: int | None = None
        self.timed_out = False
        self.pid = _server.start({"argv": argv, "cwd": str(cwd), "env": env, "out": str(out),
                                  "err": None if err is None else str(err),
                                  "timeout": timeout})
        _server.running = self

    def poll(self) -> int | None:
        if self.returncode is None and (reply := _server.reply(0)) is not None:
            self._ended(reply["code"])
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if (reply := _server.reply(timeout)) is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._ended(reply["code"])
        return self.returncode

    def _ended(self, code: int | None) -> None:
        self.timed_out = code is None
        self.returncode = -signal.SIGKILL if code is None else code

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def forked_run(argv: list[str], cwd: Path, env: dict[str, str],
               timeout: float) -> subprocess.CompletedProcess:
    """`subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True,
    text=True, timeout=timeout)`, forked."""
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        run = Forked(argv, cwd, env, out, err, timeout)
        code = run.wait()
        if run.timed_out:
            raise subprocess.TimeoutExpired(argv, timeout, out.read_text(), err.read_text())
        return subprocess.CompletedProcess(argv, code, out.read_text(), err.read_text())
