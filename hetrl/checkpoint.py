"""A job's whole training state in one file, so a stopped job resumes exactly; and its
policy in another (`policy.pt`: the config and the networks' weights, no training state), what
`hetrl.load` reads."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from hetrl.config.errors import ConfigError
from hetrl.faults import Fault

FILENAME = "checkpoint.pt"
POLICY = "policy.pt"


def save(path: Path, state: dict[str, Any]) -> None:
    """Write atomically: a crash mid-write leaves the previous checkpoint intact."""
    tmp = path.with_suffix(".tmp")
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as error:
        tmp.unlink(missing_ok=True)
        raise Fault(_not_written(path, error)) from error


def _not_written(path: Path, error: BaseException) -> str:
    """Why the checkpoint could not be written, and what to do: torch reports a full disk
    as "basic_ios::clear: iostream error" or "unexpected pos", without an errno."""
    free = shutil.disk_usage(path.parent).free if path.parent.is_dir() else None
    full = (getattr(error, "errno", None) == errno.ENOSPC or "iostream error" in str(error)
            or "unexpected pos" in str(error) or (free is not None and free < 1 << 20))
    kept = ("the previous checkpoint is kept" if path.is_file()
            else "no earlier checkpoint to resume from")
    if full:
        return (f"cannot write the checkpoint {path}: the disk is full ({(free or 0) / 1e6:.0f} "
                f"MB free in {path.parent}); {kept}: free space there, then resume "
                f"with `python -m hetrl resume={path.parent}`")
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return (f"cannot write the checkpoint {path}: {reason}; {kept}: make {path.parent} "
            f"writable, then resume with `python -m hetrl resume={path.parent}`")


def load(job_dir: Path, key: str = "resume") -> dict[str, Any]:
    """The checkpoint in `job_dir`; `key` names the setting that pointed there (its error)."""
    path = job_dir / FILENAME
    if not path.is_file():
        raise ConfigError(
            f"{key}={str(job_dir)!r} is invalid: no {FILENAME} there; valid values are "
            "output dirs of jobs that ran with checkpoint_every > 0 or finished"
        )
    try:
        return torch.load(path, weights_only=False, map_location="cpu")
    except Exception as error:  # a torn zip (RuntimeError), EOFError, UnpicklingError, ...
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise Fault(
            f"cannot resume from {path}: the file is truncated or corrupt ({reason}); resume "
            "from a copy of that job dir that has a whole checkpoint, or start the job afresh"
        ) from error


def save_policy(path: Path, state: dict[str, Any]) -> Path:
    """Write a policy file (plain data and tensors only: `load_policy` reads it with
    `weights_only`, so loading one runs no pickled code)."""
    save(path, state)
    return path


def load_policy(path: Path) -> dict[str, Any]:
    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except Exception as error:  # noqa: BLE001 - named below, whatever torch raised
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise Fault(f"cannot load the policy {path}: {reason}") from error
