"""hetrl's folder in the user's cache (XDG_CACHE_HOME or ~/.cache): what outlives a job on
this machine (inductor's kernels, the empty MLflow store)."""

from __future__ import annotations

import os
from pathlib import Path


def user_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hetrl"
