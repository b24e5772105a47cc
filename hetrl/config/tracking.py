"""Tracking schemas: MLflow, TensorBoard, or nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from omegaconf import II, MISSING

from hetrl.config.errors import require

VIEW_KINDS = ("tags", "params", "metrics", "attributes")  # the runs table's kinds of column


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
        require(self.system_metrics_s >= 0, "tracking.system_metrics_s", self.system_metrics_s,
                "numbers >= 0 (0: off)")
        for column in self.view_columns:
            kind, _, name = column.partition(".")
            require(kind in VIEW_KINDS and bool(name), "tracking.view_columns", column,
                    f"<{'|'.join(VIEW_KINDS)}>.<name> (metrics.eps_host)")


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
