"""Whether a job's sqlite store is still the file it opened: SQLite keeps writing into a
database file that was deleted (or replaced by another), and every record of the run would
be lost without a word."""

from __future__ import annotations

import os
from pathlib import Path

from hetrl.faults import StoreLost


class StoreWatch:
    """The identity (device, inode) of a sqlite store's file when the job opened it; `check`
    raises StoreLost once the file at that path is gone or another. Other stores (a tracking
    server) say so themselves when a write fails."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.path: Path | None = None
        if uri.startswith("sqlite:///"):
            self.path = Path(uri.removeprefix("sqlite:///").split("?", 1)[0]).resolve()
        self.identity = self._identity()
        self.lost = False

    def _identity(self) -> tuple[int, int] | None:
        try:
            stat = os.stat(self.path) if self.path is not None else None
        except FileNotFoundError:
            return None
        return None if stat is None else (stat.st_dev, stat.st_ino)

    def check(self) -> None:
        if self.path is None or self.lost or self._identity() == self.identity:
            return
        self.lost = True
        how = "deleted" if not self.path.exists() else "replaced by another file"
        raise StoreLost(
            f"tracking.uri={self.uri}: the store {self.path} was {how} while the job ran: "
            "what the run recorded there is lost and nothing more can be (put the store back "
            "from a backup, then go on with the job's resume=, or start it afresh)")
