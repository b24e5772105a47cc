"""Scheduler schemas: the training loops take no options of their own."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING


@dataclass
class SchedulerConfig:
    _target_: str = MISSING
