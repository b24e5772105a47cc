"""The error a bad config raises, and the range check every schema uses."""

from __future__ import annotations

from typing import Any

from hydra.errors import CompactHydraException


class ConfigError(CompactHydraException, ValueError):
    """A config value is out of range or two choices do not fit together.

    Compact, as Hydra's own composition errors: `python -m hetrl` prints its message, not a
    traceback, and exits non-zero (HYDRA_FULL_ERROR=1 shows the traceback; the job's log
    keeps it, and so does the run's error.txt where a run was started)."""


def require(ok: bool, key: str, value: Any, valid: str) -> None:
    """Raise a ConfigError naming `key`, its `value` and the `valid` ones unless `ok`."""
    if not ok:
        raise ConfigError(f"{key}={value!r} is invalid: valid values are {valid}")
