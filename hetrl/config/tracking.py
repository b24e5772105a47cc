"""Tracking schemas: MLflow, TensorBoard, or nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from omegaconf import II, MISSING

from hetrl.config.errors import require


@dataclass
class MlflowTrackingConfig:
    _target_: str = MISSING
    uri: str = MISSING
    experiment: str = MISSING
    # set by the sweep callback for the jobs of a multirun
    parent_run_id: Optional[str] = II("oc.env:HETRL_PARENT_RUN_ID,null")
    # seconds between samples of MLflow's system metrics (CPU, memory, disk, network); 0: off
    system_metrics_s: float = MISSING

    def __post_init__(self) -> None:
        require(self.system_metrics_s >= 0, "tracking.system_metrics_s", self.system_metrics_s,
                "numbers >= 0 (0: off)")


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
