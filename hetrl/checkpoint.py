"""A job's whole training state in one file, so a stopped job resumes exactly."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from hetrl.config.errors import ConfigError

FILENAME = "checkpoint.pt"


def save(path: Path, state: dict[str, Any]) -> None:
    """Write atomically: a crash mid-write leaves the previous checkpoint intact."""
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load(job_dir: Path) -> dict[str, Any]:
    path = job_dir / FILENAME
    if not path.is_file():
        raise ConfigError(
            f"resume={str(job_dir)!r} is invalid: no {FILENAME} there; valid values are "
            "output dirs of jobs that ran with checkpoint_every > 0 or finished"
        )
    return torch.load(path, weights_only=False, map_location="cpu")
