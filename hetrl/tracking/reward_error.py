"""`reward_error_pct`: a run's final return against its reference run (AP-DRL's reward error:
|R - R_ref| / |R_ref| x 100, R the final return_mean_100).

The reference is the same job with the plain choices of what hetrl optimizes: fp32 for the
precision policy (AP-DRL), the uniform sampler (every layout's default) for the MARL paper's
sampling optimizations. A job that makes neither change is its own reference and has none.
`time_to_95pct_s`: how soon a run with quantized actors reaches the return of its twin with
fp32 actors (ActorQ's Table 4).
"""

from __future__ import annotations

import hashlib
import json

from typing import Mapping, Sequence

from omegaconf import DictConfig, OmegaConf

from hetrl.options import composed_option

NOT_NUMERICS = ("precision", "platform", "partitioner", "tracking", "resume", "log_every",
                "checkpoint_every", "device")
"""Config keys that do not change what is learned (the precision policy is what is compared)."""


def numerics_key(cfg: DictConfig) -> str:
    """Equal for two jobs that differ only in precision, platform and bookkeeping."""
    data = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    for key in NOT_NUMERICS:
        data.pop(key, None)
    return hashlib.sha1(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def reference_job(cfg: DictConfig, choices: Mapping[str, str]
                  ) -> tuple[DictConfig, dict[str, str]] | None:
    """The config and choices of the run this job's reward is compared with, or None."""
    twin = OmegaConf.merge(cfg, {"precision": None})
    twin.precision = composed_option("precision", "fp32")
    if "sampler" in cfg.replay:  # the layouts' own sampler; the replay's other keys as they are
        twin.replay.sampler = composed_option("replay/sampler", "uniform")
    if choices["precision"] == "fp32" and numerics_key(twin) == numerics_key(cfg):
        return None
    return twin, {**choices, "precision": "fp32"}


def reward_error_pct(value: float, reference: float) -> float:
    return abs(value - reference) / max(abs(reference), 1e-12) * 100.0


ACTOR_QUANTIZATION = ("precision", "int8_mode", "per_channel", "quantize_on")
"""The actors' keys that only say how their policy copy is quantized."""


def fp32_actors_key(cfg: DictConfig) -> str:
    """Equal for two jobs that differ only in how their actors quantize (and what
    numerics_key ignores): the key of the job's twin with fp32 actors."""
    data = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    for key in ACTOR_QUANTIZATION:
        data.get("actors", {}).pop(key, None)
    return numerics_key(OmegaConf.create(data))


def time_to_reach(history: Sequence[tuple[int, float]], history_s: Sequence[float],
                  reference: float, fraction: float) -> float | None:
    """The first wall time at which the curve reached `fraction` of `reference` (for a
    negative reference: came within (1 - fraction)·|reference| of it); None if it never did."""
    target = reference - (1.0 - fraction) * abs(reference)
    for (_, value), seconds in zip(history, history_s):
        if value >= target:
            return seconds
    return None
