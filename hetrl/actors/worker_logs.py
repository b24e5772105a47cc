"""Each worker process's own log, beside the job's log file (`workers/<name>.log`): what it
does (a line a task), what it and its libraries log, Python's warnings and a native crash's
stack. A worker that dies or hangs is then named with the last line it wrote, where the
job's log, shared by every process, would not tell whose line is whose."""

from __future__ import annotations

import faulthandler
import logging
import os
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Sequence

log = logging.getLogger("hetrl.worker")  # a worker's own lines: its log file only
FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # the job log's (Hydra's)
MAX_BYTES = 1 << 20
"""A worker's log is rotated at this size into one backup (`<name>.log.1`): it grows by a
line a task (a chunk, a game), ~100 bytes every few milliseconds at the fastest, so a week's
job kept gigabytes per worker; 1 MiB holds ~10,000 lines, the latest minutes at the least,
and what a message quotes is the last one. A job of 64 workers keeps at most 128 MiB."""
TAIL_BYTES = 64 << 10  # the last line is looked for in the log's last 64 KiB


class _Rotating(RotatingFileHandler):
    """A rotating handler that keeps faulthandler writing into its open file: a rollover
    closes the file whose descriptor faulthandler holds (a native crash's stack would go to
    whatever file took that descriptor next)."""

    def doRollover(self) -> None:
        super().doRollover()
        faulthandler.enable(self.stream)


def worker_log(name: str) -> Path | None:
    """Where worker `name` logs: beside the job's log file (the root logger's first file
    handler to a regular file, not os.devnull); None where the job logs to no file (hetrl
    used as a library)."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).is_file():
            return Path(handler.baseFilename).parent / "workers" / f"{name}.log"
    return None


def log_to(path: Path | None) -> None:
    """The worker's first call: from now on its records (`log`'s, and the root logger's from
    INFO up), warnings and a fatal error's stack are written to `path` too, line by line."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = _Rotating(path, maxBytes=MAX_BYTES, backupCount=1)  # flushed a record
    except OSError as error:  # the worker works on without a log of its own
        logging.getLogger("hetrl").warning("%s: no log of its own (%s)", path.stem, error)
        return
    handler.setFormatter(logging.Formatter(FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    if root.level == logging.NOTSET or root.level > logging.INFO:  # a spawned worker's
        root.setLevel(logging.INFO)
    log.addHandler(handler)
    log.propagate = False  # not into the job's log or terminal a forked worker inherited
    logging.captureWarnings(True)
    # enable() on an enabled faulthandler (pytest's, a parent's) only switches its file: where
    # a library installed its own SIGSEGV handler since (Ray's driver does, and a forked
    # worker inherits it), the stack would go there. Disabled first, it is installed anew.
    faulthandler.disable()
    faulthandler.enable(handler.stream)
    log.info("%s started (pid %d)", path.stem, os.getpid())


def last_words(path: Path | None) -> str:
    """The last line of the worker's log at `path`, for a message naming the worker: `its
    last log line: '...' (path)`; "" where it has no log. Its log just rotated holds none
    yet: the line is then its backup's."""
    if path is None:
        return ""
    for file in (path, path.with_name(f"{path.name}.1")):
        if line := _last_line(file):
            return f"its last log line: {line[-300:]!r} ({file})"
    return f"it logged nothing ({path})"


def _last_line(path: Path) -> str:
    """The last line of `path` that is not blank ("" for none, or no such file)."""
    try:
        with path.open("rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - TAIL_BYTES))
            tail = file.read().decode(errors="replace")
    except OSError:
        return ""
    return next((line.strip() for line in reversed(tail.splitlines()) if line.strip()), "")


def said(path: Path | None) -> str:
    """`; <last_words>` to add to a worker's name, or nothing."""
    words = last_words(path)
    return f"; {words}" if words else ""


def look_in(logs: Sequence[Path | None]) -> str:
    """Where a dead worker's last words are: quoted beside its name where it has a log of its
    own, else the job's log."""
    return "" if any(logs) else "its last words, if any, are in the job's log above; "
