"""What torch.compile needs on this machine, and where its compiled kernels are kept.

Inductor's CPU backend writes C++ and builds it: it needs a C++ compiler and Python's
headers. Its caches (the FX graph cache, AOTAutograd's, the built kernels) live under
TORCHINDUCTOR_CACHE_DIR; hetrl points it at a directory of the user's cache that outlives
jobs and reboots, so the second job of a sweep with the same shapes loads its update compiled
instead of compiling it. Beside them, hetrl's records of this machine: what each compile took
(`hetrl.compiled.choose`), and which of inductor's checks of the CPU's vector ISAs passed
(`remember_isa_probes`)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sysconfig
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock

from hetrl.paths import user_cache
from hetrl.platform.host import cpu_name

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
RECORDS = "hetrl-compile-times.json"


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


def use_caches() -> None:
    """Point inductor at hetrl's caches (`cache_dir`) and ISA records (`remember_isa_probes`),
    before a process compiles: its first lookup must find what earlier jobs compiled (set
    only later, by the first record read mid-compile, the lookup went to inductor's temporary
    default and the kernels to hetrl's cache, so no later job found them)."""
    cache_dir()
    remember_isa_probes()


def remember_isa_probes() -> None:
    """Inductor checks each vector ISA the CPU reports (AVX2, AVX-512, its bf16 and VNNI
    extensions) by building a test library with its flags and loading it in a new Python
    process, in every process that compiles: six processes, ~1 s of each cached start here
    (AlphaZero's 5.9 s), and of each actor that compiles its forward. The library is built
    once into inductor's cache; a load that passed on this CPU passes again, so the loads
    that passed are kept per machine (the library, its build, the CPU) and a later process
    takes them instead of loading it again. One that failed is probed again."""
    from torch._inductor.cpu_vec_isa import VecISA

    probe = VecISA._probe_load
    if getattr(probe, "remembered", False):
        return

    def remembered(isa: VecISA, library: str) -> bool:
        identity = [library, os.stat(library).st_mtime_ns, cpu_name()]
        key = "isa-probe|" + hashlib.sha1(json.dumps(identity).encode()).hexdigest()[:16]
        if records().get(key):
            return True
        loaded = probe(isa, library)
        if loaded:
            record(key, True)
        return loaded

    remembered.remembered = True  # type: ignore[attr-defined]
    VecISA._probe_load = remembered  # type: ignore[method-assign]


def records() -> dict[str, Any]:
    """hetrl's records of this machine's compiles, by key (empty where there are none)."""
    try:
        return json.loads((cache_dir() / RECORDS).read_text())
    except (OSError, ValueError):
        return {}


def record(key: str, value: Any) -> None:
    """Keep `value` under `key` in the records (written whole, or not at all), one process
    at a time: jobs of a sweep that record at once each keep theirs."""
    path = cache_dir() / RECORDS
    with FileLock(path.with_suffix(".lock")):
        everything = {**records(), key: value}
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(everything))
        tmp.replace(path)


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
