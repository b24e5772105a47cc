"""The run-level schema: one node per config group and the job's own keys (conf/config.yaml
holds their values)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from omegaconf import MISSING

from hetrl.config.enums import Device
from hetrl.config.errors import require


@dataclass
class RunConfig:
    env: Any = MISSING
    algo: Any = MISSING
    platform: Any = MISSING
    precision: Any = MISSING
    scheduler: Any = MISSING
    replay: Any = MISSING
    tracking: Any = MISSING
    partitioner: Any = MISSING
    actors: Any = MISSING
    seed: int = MISSING
    steps: int = MISSING
    device: Device = MISSING
    checkpoint_every: int = MISSING
    resume: Optional[str] = MISSING
    log_every: int = MISSING

    def __post_init__(self) -> None:
        require(self.steps >= 1, "steps", self.steps, "integers >= 1")
        require(self.seed >= 0, "seed", self.seed, "integers >= 0")
        require(self.checkpoint_every >= 0, "checkpoint_every", self.checkpoint_every,
                "integers >= 0 (0: checkpoint only at the end)")
        require(self.log_every >= 1, "log_every", self.log_every, "integers >= 1")
