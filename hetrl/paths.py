"""hetrl's folders: the config tree shipped beside the package, and hetrl's folder in the
user's cache (XDG_CACHE_HOME or ~/.cache), what outlives a job on this machine (inductor's
kernels, the empty MLflow store)."""

from __future__ import annotations

import os
from pathlib import Path

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
"""The Hydra config tree shipped beside the package (the repo's `conf/`)."""


def user_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hetrl"
