"""Tracking schemas: MLflow, or nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from omegaconf import II, MISSING


@dataclass
class MlflowTrackingConfig:
    _target_: str = MISSING
    uri: str = MISSING
    experiment: str = MISSING
    # set by the sweep callback for the jobs of a multirun
    parent_run_id: Optional[str] = II("oc.env:HETRL_PARENT_RUN_ID,null")


@dataclass
class NullTrackingConfig:
    _target_: str = MISSING
    uri: Optional[str] = None
    experiment: Optional[str] = None
