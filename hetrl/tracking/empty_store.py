"""A new sqlite MLflow store starts as a copy of an empty one. MLflow makes a store's schema
by running its ~50 migrations (1.5-2.5 s on 2 idle cores, 4-13 s on busy ones): that is done
once per machine and MLflow version, into the user's cache, and each new store is a copy
(~50 ms) that MLflow opens as one it made itself.

Another MLflow client (a notebook's `MlflowClient(uri)`, `mlflow ui`) may open the same new
store meanwhile: SQLite creates the file as it connects, and that client then runs the
migrations into it. A job that found the file and ran them too failed (`duplicate column name:
step`, `table alembic_version already exists`: each migrated what the other had begun), and
a copy moved over the file that client was writing would be read with that client's journal.
So the copy is linked into place only where no file is, and a store another client is making
is waited for until its schema is whole."""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

import mlflow
from mlflow.tracking import MlflowClient

from hetrl.paths import user_cache

MAKING_S = 5.0
"""A store not at MLflow's newest schema whose file (or journal) changed this recently is
being made by another client; one quiet for longer (a store of an older MLflow, one whose
maker died) is left to MLflow, which names what it finds."""
MAKING_WAIT_S = 60.0  # the most a job waits for another client's migrations (4-13 s when busy)


def empty_store() -> Path:
    """The migrated, empty store of this MLflow version (made on first use; makers racing
    each put a whole one in place)."""
    cache = user_cache()
    path = cache / f"mlflow-{mlflow.__version__}-empty.db"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as folder:
            made = Path(folder) / "mlflow.db"
            MlflowClient(f"sqlite:///{made}").search_experiments()
            os.replace(made, path)
    return path


def create_store(db: Path) -> None:
    """`db` as a copy of the empty store where no file is, else (another MLflow client's
    store, maybe still being made) once its schema is whole. The caller holds the store's
    lock: no other hetrl job creates it meanwhile."""
    if not db.exists():
        partial = db.with_name(f"{db.name}.new")
        shutil.copyfile(empty_store(), partial)
        try:
            os.link(partial, db)  # fails where a file appeared meanwhile: never over it
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links: moved, as close to atomic
            os.replace(partial, db)
        partial.unlink(missing_ok=True)
    _wait_while_made(db)


def _wait_while_made(db: Path) -> None:
    """Until `db` has MLflow's newest schema (that of the empty store), or nothing has
    written it for MAKING_S, or MAKING_WAIT_S passed."""
    newest = _revision(empty_store())
    deadline = time.monotonic() + MAKING_WAIT_S
    while _revision(db) != newest and time.monotonic() < deadline:
        if time.time() - max(_written(db), _written(Path(f"{db}-journal"))) > MAKING_S:
            return
        time.sleep(0.1)


def _written(path: Path) -> float:
    """When `path` was last written (0: it is not there, as a journal between writes)."""
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _revision(db: Path) -> str | None:
    """The schema revision MLflow's migrations left in `db` (None: none yet, or the file
    is locked by the client writing it)."""
    try:
        connection = sqlite3.connect(f"{db.resolve().as_uri()}?mode=rw", uri=True, timeout=0.1)
    except sqlite3.Error:
        return None
    try:
        found = connection.execute("SELECT version_num FROM alembic_version").fetchall()
    except sqlite3.Error:
        return None
    finally:
        connection.close()
    return found[0][0] if len(found) == 1 else None
