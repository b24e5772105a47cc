"""Whether a job's store is still there: a sqlite store is still the file it opened (SQLite
keeps writing into a database file that was deleted or replaced, and every record of the
run would be lost without a word); a tracking server still answers (MLflow's client retries
a refused write for minutes, then fails the job with a traceback)."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from hetrl.faults import StoreLost

PROBE_TIMEOUT_S = 2.0  # how long one look at a tracking server waits for its answer
GONE_AFTER_S = 3.0  # how long a server that does not answer is asked again before it is gone


class StoreWatch:
    """Looks, at each `check` (once a log interval), whether the store of `uri` is still
    there: a sqlite store's file has the identity (device, inode) it had when the job opened
    it; a tracking server (http, https) answers its /health within GONE_AFTER_S. Raises
    StoreLost, naming the store and what to do, the first time it is not."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.path: Path | None = None
        if uri.startswith("sqlite:///"):
            self.path = Path(uri.removeprefix("sqlite:///").split("?", 1)[0]).resolve()
        self.server = uri.startswith(("http://", "https://"))
        self.identity = self._identity()
        self.lost = False
        self.run_id: str | None = None  # the job's run, once open: a lost server's keeps it

    def check(self) -> None:
        if self.lost:
            return
        why = self._file_lost() if self.path is not None else self._server_lost()
        if why is not None:
            self.lost = True
            raise StoreLost(why)

    @contextmanager
    def writing(self) -> Iterator[None]:
        """A write that fails because the store is gone raises StoreLost, not the client's
        error."""
        try:
            yield
        except StoreLost:
            raise
        except Exception:
            self.check()
            raise

    def _identity(self) -> tuple[int, int] | None:
        try:
            stat = os.stat(self.path) if self.path is not None else None
        except FileNotFoundError:
            return None
        return None if stat is None else (stat.st_dev, stat.st_ino)

    def _file_lost(self) -> str | None:
        if self.path is None or self._identity() == self.identity:
            return None
        how = "deleted" if not self.path.exists() else "replaced by another file"
        return (f"tracking.uri={self.uri}: the store {self.path} was {how} while the job ran: "
                "what the run recorded there is lost and nothing more can be (put the store "
                "back from a backup, then go on with the job's resume=, or start it afresh)")

    def _server_lost(self) -> str | None:
        if not self.server:
            return None
        gone_at = time.monotonic() + GONE_AFTER_S
        while (why := no_answer(self.uri)) is not None:
            if time.monotonic() >= gone_at:
                return (f"tracking.uri={self.uri}: the tracking server stopped answering "
                        f"({why}) while the job ran: what it logs can no longer be recorded"
                        f"{self._run_stays()} (start the server again, python -m "
                        "hetrl.tracking.server up with its --dir and --port, then go on with "
                        f"the job's resume=: its run goes on from its last log{self._or_end()})")
            time.sleep(1.0)
        return None

    def _run_stays(self) -> str:
        """What becomes of the job's run on a server that went away: nothing can end it."""
        if self.run_id is None:
            return ""
        return f", and its MLflow run {self.run_id} stays RUNNING there until resumed or ended"

    def _or_end(self) -> str:
        """How to end the run instead, once the server answers again."""
        if self.run_id is None:
            return ""
        return (f"; or end the run: python -c \"from mlflow import MlflowClient; "
                f"MlflowClient('{self.uri}').set_terminated('{self.run_id}', 'KILLED')\"")


def no_answer(uri: str) -> str | None:
    """Why the tracking server at `uri` gives no answer (any HTTP status is one) to a GET of
    its /health within PROBE_TIMEOUT_S; None if it answers."""
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    try:
        http_request(get_default_host_creds(uri), "/health", "GET", max_retries=0,
                     timeout=PROBE_TIMEOUT_S)
    except Exception as error:  # noqa: BLE001 - refused, unknown host, no answer: named
        return why_no_answer(error, PROBE_TIMEOUT_S)
    return None


def why_no_answer(error: Exception, timeout_s: float) -> str:
    """A few words for why a request got no answer within `timeout_s`."""
    text = str(error)
    for words, why in (("refused", "connection refused"),
                       ("Name or service not known", "unknown host"),
                       ("NameResolution", "unknown host"), ("getaddrinfo", "unknown host"),
                       ("timed out", f"no answer within {timeout_s:.0f} s"),
                       ("Timeout", f"no answer within {timeout_s:.0f} s")):
        if words in text:
            return why
    return text[:200]
