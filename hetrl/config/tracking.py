"""Tracking schemas: MLflow, TensorBoard, or nothing."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Optional
from urllib.parse import urlsplit

from omegaconf import II, MISSING

from hetrl.config.errors import ConfigError, require

VIEW_KINDS = ("tags", "params", "metrics", "attributes")  # the runs table's kinds of column
NAMED_STORES = ("databricks", "databricks-uc", "uc")  # MLflow stores named without a scheme


@dataclass
class MlflowTrackingConfig:
    _target_: str = MISSING
    uri: str = MISSING
    experiment: str = MISSING
    # set by the sweep callback for the jobs of a multirun
    parent_run_id: Optional[str] = II("oc.env:HETRL_PARENT_RUN_ID,null")
    # seconds between samples of MLflow's system metrics (CPU, memory, disk, network); 0: off
    system_metrics_s: float = MISSING
    # the runs table's columns in hetrl's saved view of the experiment in the UI
    view_columns: List[str] = MISSING

    def __post_init__(self) -> None:
        _check_store_uri(self.uri)
        require(self.system_metrics_s >= 0, "tracking.system_metrics_s", self.system_metrics_s,
                "numbers >= 0 (0: off)")
        for column in self.view_columns:
            kind, _, name = column.partition(".")
            require(kind in VIEW_KINDS and bool(name), "tracking.view_columns", column,
                    f"<{'|'.join(VIEW_KINDS)}>.<name> (metrics.eps_host)")


def _check_store_uri(uri: str) -> None:
    """MLflow 3 refuses a folder as its store (`file:<path>`, or a bare path: its file store)
    unless MLFLOW_ALLOW_FILE_STORE is true; named here, before a job starts, with the sqlite
    store to use instead."""
    parts = urlsplit(uri)
    if not uri or parts.scheme not in ("", "file") or uri in NAMED_STORES:
        return  # "": MLflow's default store
    if os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() in ("true", "1"):
        return
    folder = parts.path.rstrip("/") or "."
    raise ConfigError(
        f"tracking.uri={uri!r} is invalid: MLflow 3 keeps runs in a database, not in a "
        f"folder: use tracking.uri=sqlite:///{folder}/mlflow.db (sqlite:///<path>/mlflow.db; "
        "a relative path is relative to where hetrl starts), or set "
        "MLFLOW_ALLOW_FILE_STORE=true to keep MLflow's file store")


@dataclass
class TensorboardTrackingConfig:
    _target_: str = MISSING
    logdir: str = MISSING  # one subfolder per job: <logdir>/<run name>-<time>
    # the sweep callback reads these two: a TensorBoard job has no MLflow parent run
    uri: Optional[str] = None
    experiment: Optional[str] = None


@dataclass
class NullTrackingConfig:
    _target_: str = MISSING
    uri: Optional[str] = None
    experiment: Optional[str] = None
