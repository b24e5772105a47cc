"""`reward_error_pct`: a run's final return against the fp32 run with the same numerics
(AP-DRL's reward error: |R - R_fp32| / |R_fp32| x 100, R the final return_mean_100)."""

from __future__ import annotations

import hashlib
import json

from omegaconf import DictConfig, OmegaConf

NOT_NUMERICS = ("precision", "platform", "partitioner", "tracking", "resume", "log_every",
                "checkpoint_every", "device")
"""Config keys that do not change what is learned (the precision policy is what is compared)."""


def numerics_key(cfg: DictConfig) -> str:
    """Equal for two jobs that differ only in precision, platform and bookkeeping."""
    data = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    for key in NOT_NUMERICS:
        data.pop(key, None)
    return hashlib.sha1(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def reward_error_pct(value: float, reference: float) -> float:
    return abs(value - reference) / max(abs(reference), 1e-12) * 100.0
