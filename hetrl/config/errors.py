"""The error a bad config raises, the range check every schema uses, and `unwrapped`: the
error a constructor raised, out of Hydra's wrapper."""

from __future__ import annotations

import difflib
from contextlib import contextmanager
from enum import Enum
from typing import Any, Iterator, Mapping

from hydra.errors import CompactHydraException, InstantiationException


class ConfigError(CompactHydraException, ValueError):
    """A config value is out of range or two choices do not fit together.

    Compact, as Hydra's own composition errors: `python -m hetrl` prints its message, not a
    traceback, and exits non-zero (HYDRA_FULL_ERROR=1 shows the traceback; the job's log
    keeps it, and so does the run's error.txt where a run was started)."""


def require(ok: bool, key: str, value: Any, valid: str) -> None:
    """Raise a ConfigError naming `key`, its `value` and the `valid` ones unless `ok`."""
    if not ok:
        raise ConfigError(f"{key}={shown(value)!r} is invalid: valid values are {valid}")


def shown(value: Any) -> Any:
    """`value` as the config spells it: an enum (a dtype, a node kind) by its value, in
    mappings and lists too (`{'fp16': 0.0}`, not `{<DType.fp16: 'fp16'>: 0.0}`)."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {shown(k): shown(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [shown(v) for v in value]
    return value


@contextmanager
def unwrapped(*kinds: type[Exception]) -> Iterator[None]:
    """An error of `kinds` that a constructor raised inside Hydra's `instantiate` is raised as
    itself, not as Hydra's InstantiationException (printed as "Error in call to target ..."
    around it): `python -m hetrl` prints it in one line."""
    try:
        yield
    except InstantiationException as error:
        if isinstance(error.__cause__, kinds):
            raise error.__cause__ from None
        raise


def nearest(value: str, options: list[Any], prefix: str) -> str:
    """`: did you mean <prefix><option>?` for the option closest to `value`, or nothing."""
    close = difflib.get_close_matches(value, [str(o) for o in options], n=1)
    return f": did you mean {prefix}{close[0]}?" if close else ""
