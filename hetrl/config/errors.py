"""The error a bad config raises, and the range check every schema uses."""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A config value is out of range or two choices do not fit together."""


def require(ok: bool, key: str, value: Any, valid: str) -> None:
    """Raise a ConfigError naming `key`, its `value` and the `valid` ones unless `ok`."""
    if not ok:
        raise ConfigError(f"{key}={value!r} is invalid: valid values are {valid}")
