"""This machine's record of the host's step plans, in hetrl's user cache.

A plan on the host stands on timings: every layer pass in each dtype, and (a precision other
than float32) whole updates of the candidates. On a CPU many of them are near ties, so a job
that timed them again would choose by noise: three builds of one mixed job chose three
per-layer plans, each new graph to compile (17-28 s) where the cache holds the last one
(5-6 s), and the jobs of a sweep computed in different dtypes. So the first job of a step
records its plan, and every later job whose step has the same identity (`plan_key`) trains in
it, as a resumed job does in its checkpoint's (`platform.reuse_plan=false` times it again and
records nothing).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
from datetime import datetime, timezone
from functools import cache
from pathlib import Path
from typing import Any

import torch

from hetrl.algos.base import Learner
from hetrl.compiled.choose import record_key
from hetrl.paths import user_cache
from hetrl.planning import StepPlan
from hetrl.platform.host import HostPlatform, cpu_name

log = logging.getLogger("hetrl")

_PLANNERS = ("hetrl.build", "hetrl.planning", "hetrl.platform.host", "hetrl.platform.measure",
             "hetrl.partition.costs", "hetrl.partition.graph", "hetrl.partition.composer",
             "hetrl.partition.primitives", "hetrl.plan_record")


@cache
def _planner_code() -> str:
    """A digest of the code that measures, plans and records a step: a record made by other
    code (another layout of its objects, another way of timing) is another key, never read."""
    digest = hashlib.sha1()
    for name in _PLANNERS:
        digest.update(Path(importlib.util.find_spec(name).origin).read_bytes())
    return digest.hexdigest()[:16]


def plan_key(learner: Learner, platform: HostPlatform, configs: dict[str, Any]) -> str:
    """The identity of a step's plan on this machine: the learner's class, parameter shapes
    and task graph (its batch size included), the `configs` that choose the plan (precision,
    platform, partitioner), this host (`describe`, its CPU's 16-bit instructions) and the
    planning code."""
    graph = learner.task_graph(learner.batch_size)
    name = "|".join([type(learner).__name__, json.dumps(configs, sort_keys=True),
                     json.dumps(platform.describe(), sort_keys=True), cpu_name(),
                     _planner_code(), repr(graph)])
    return record_key(f"plan|{name}", learner.state_dict(), [])


def _path(key: str) -> Path:
    return user_cache() / "host-plans" / f"{key}.pt"


def recorded_plan(key: str) -> StepPlan | None:
    """The plan recorded under `key`, logged with when it was measured; None where there is
    none (or it cannot be read: then the job measures as if there were none)."""
    path = _path(key)
    try:
        record = torch.load(path, weights_only=False, map_location="cpu")
    except FileNotFoundError:
        return None
    except Exception as error:  # noqa: BLE001 - a torn or stale record: measure again
        log.warning("the recorded host plan %s cannot be read (%s): timing the step again",
                    path, error)
        return None
    log.info("host plan: as measured on this machine at %s (%s); platform.reuse_plan=false "
             "times the step again", record["measured_at"], path)
    return record["step_plan"]


def record_plan(key: str, step_plan: StepPlan) -> None:
    """Keep `step_plan` under `key` for the next job (written whole or not at all)."""
    path = _path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    measured_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    torch.save({"step_plan": step_plan, "measured_at": measured_at}, tmp)
    tmp.replace(path)
