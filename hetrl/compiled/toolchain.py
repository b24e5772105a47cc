"""What torch.compile needs on this machine, and where its compiled kernels are kept.

Inductor's CPU backend writes C++ and builds it: it needs a C++ compiler and Python's
headers. Its caches (the FX graph cache, AOTAutograd's, the built kernels) live under
TORCHINDUCTOR_CACHE_DIR; hetrl points it at a directory of the user's cache that outlives
jobs and reboots, so the second job of a sweep with the same shapes loads its update compiled
instead of compiling it."""

from __future__ import annotations

import os
import shutil
import sysconfig
from pathlib import Path

import torch

from hetrl.paths import user_cache

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


def missing(device: torch.device) -> str | None:
    """What inductor lacks here to compile for `device` (None: nothing). CUDA builds its
    kernels with Triton; the CPU with the host's C++ compiler."""
    if device.type == "cuda":
        try:
            import triton  # noqa: F401
        except ImportError:
            return "Triton (the CUDA backend of torch.compile) is not installed"
        return None
    from torch._inductor import config

    cxx = config.cpp.cxx
    candidates = [c for c in (cxx if isinstance(cxx, tuple) else (cxx,)) if c]
    if not any(shutil.which(c) for c in candidates):
        return (f"a C++ compiler ({' or '.join(candidates)}), which inductor builds the CPU "
                "kernels with, is not on PATH")
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not headers.exists():
        return f"Python's headers ({headers}) are not installed (the python3-dev package)"
    return None


def cache_dir() -> Path:
    """The directory of inductor's caches: TORCHINDUCTOR_CACHE_DIR where the user set it,
    else hetrl/inductor under the user's cache directory (XDG_CACHE_HOME or ~/.cache), which
    the environment is pointed at for this process and those it starts (importing inductor
    sets the variable to its own default, a temporary directory: that one is replaced)."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    current = os.environ.get(CACHE_ENV)
    if current and Path(current) != Path(default_cache_dir()).absolute():
        return Path(current)
    path = user_cache() / "inductor"
    path.mkdir(parents=True, exist_ok=True)
    os.environ[CACHE_ENV] = str(path)
    return path
