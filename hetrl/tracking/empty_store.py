"""A new sqlite MLflow store starts as a copy of an empty one. MLflow makes a store's schema
by running its ~50 migrations (1.5-2.5 s on 2 idle cores, 4-13 s on busy ones): that is done
once per machine and MLflow version, into the user's cache, and each new store is a copy
(~50 ms) that MLflow opens as one it made itself."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import mlflow
from mlflow.tracking import MlflowClient

from hetrl.cache import user_cache


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
    """`db` as a copy of the empty store, unless it exists (the caller holds the store's
    lock: no other job creates it meanwhile)."""
    if db.exists():
        return
    partial = db.with_name(f"{db.name}.new")
    shutil.copyfile(empty_store(), partial)
    os.replace(partial, db)
