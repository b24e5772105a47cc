"""`reward_error_pct`: a run's final return against its reference run (AP-DRL's reward error:
|R - R_ref| / |R_ref| x 100, R the final deterministic evaluation's `eval/return_mean` when
the run evaluates (`eval.every`), else the final training return_mean_100).

The reference is the same job with the plain choices of what hetrl optimizes: fp32 for the
precision policy (AP-DRL), the uniform sampler (every layout's default) for the MARL paper's
sampling optimizations. A job that makes neither change is its own reference and has none.
`time_to_95pct_s`: how soon a run with quantized actors reaches the return of its twin with
fp32 actors (ActorQ's Table 4).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from hetrl.config.enums import Reference
from hetrl.evaluation import reward_error_pct
from hetrl.options import composed_option
from hetrl.tracking.base import Tracker

log = logging.getLogger("hetrl")

TrainTwin = Callable[[DictConfig, Mapping[str, str], Path], Mapping[str, Any]]
"""Trains a twin job (config, choices, output dir) and returns its final metrics."""

NOT_NUMERICS = ("precision", "platform", "partitioner", "tracking", "resume", "log_every",
                "checkpoint_every", "device", "reference")
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


def twin_to_train(cfg: DictConfig, choices: Mapping[str, str], tracker: Tracker) -> bool:
    """Whether the job will train its reference run when it ends (`reference=train`, and no
    finished run of the reference's numerics is in the store yet): its start line says so."""
    reference = reference_job(cfg, choices)
    if reference is None or cfg.reference != Reference.train:
        return False
    key = "eval/return_mean" if cfg.eval.every > 0 else "return_mean_100"
    return tracker.find_metric(reference_tags(*reference), key) is None


def reference_tags(twin_cfg: DictConfig, twin_choices: Mapping[str, str]) -> dict[str, str]:
    """The tags a reference run is found by: its numerics and its precision."""
    return {"numerics_key": numerics_key(twin_cfg), "precision": twin_choices["precision"]}


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


def reference_metrics(cfg: DictConfig, choices: Mapping[str, str], results: Mapping[str, float],
                      history: Sequence[tuple[int, float]], history_s: Sequence[float],
                      out_dir: Path, tracker: Tracker, train_twin: TrainTwin
                      ) -> dict[str, float]:
    """The metrics that compare a finished job with its twins, logged at the last step:
    `reward_error_pct` against the reference run (`reference_job`), and for a run with an
    actor pool `time_to_95pct_s` against the run with fp32 actors. A twin not yet in the store
    is trained with `train_twin` (`reference=train`), or not, its metric left out (`find`)."""
    metrics: dict[str, float] = {}
    if cfg.reference != Reference.train:
        train_twin = None
    reference = reference_job(cfg, choices)
    key = final_return_key(results)
    if reference is not None and learned(results):
        twin_cfg, twin_choices = reference
        twin = twin_metrics(tracker, reference_tags(twin_cfg, twin_choices), twin_cfg,
                            twin_choices, out_dir / "reference", train_twin, key)
        if twin is not None:
            if twin.get("updates", 1) > 0:  # no error against a reference that never learned
                metrics["reward_error_pct"] = reward_error_pct(results[key], twin[key])
            else:
                log.warning("the reference run made no update: no reward_error_pct")
            metrics["reward_reference"] = twin[key]
    if get_class(cfg.scheduler._target_).needs.actor_pool and history:
        metrics.update(_time_to_95pct(cfg, choices, history, history_s, out_dir, tracker,
                                      train_twin))
    if metrics:
        tracker.log_metrics(metrics, step=cfg.steps)
    return metrics


def _time_to_95pct(cfg: DictConfig, choices: Mapping[str, str],
                   history: Sequence[tuple[int, float]], history_s: Sequence[float],
                   out_dir: Path, tracker: Tracker, train_twin: TrainTwin | None
                   ) -> dict[str, float]:
    """ActorQ's Table 4 metric: the loop's wall time until return_mean_100 first reached 95%
    of the final value of the run with fp32 actors (this run's own, if its actors are fp32)."""
    reference = history[-1][1]
    if cfg.actors.precision != "fp32":
        twin = twin_metrics(
            tracker, {"fp32_actors_key": fp32_actors_key(cfg), "actors_precision": "fp32",
                      "precision": choices["precision"]},
            OmegaConf.merge(cfg, {"actors": {"precision": "fp32"}}), choices,
            out_dir / "fp32_actors_reference", train_twin)
        if twin is None:
            return {}
        reference = twin["return_mean_100"]
    metrics = {"reward_fp32_actors": reference}
    seconds = time_to_reach(history, history_s, reference, 0.95)
    if seconds is not None:
        metrics["time_to_95pct_s"] = seconds
    return metrics


def learned(results: Mapping[str, Any]) -> bool:
    """Whether a finished run has what a reward error stands on: a final return and an update
    (a run that never learned is compared with no reference, and trains none)."""
    return final_return_key(results) in results and results.get("updates", 1) > 0


def final_return_key(results: Mapping[str, Any]) -> str:
    """The final return a reward error stands on: the last deterministic evaluation's
    (`eval/return_mean`) when the run evaluates, else the training `return_mean_100`."""
    return "eval/return_mean" if "eval/return_mean" in results else "return_mean_100"


def twin_metrics(tracker: Tracker, tags: Mapping[str, str], twin: DictConfig,
                 twin_choices: Mapping[str, str], twin_dir: Path, train_twin: TrainTwin | None,
                 key: str = "return_mean_100") -> dict[str, float] | None:
    """The final `key` (a return) and, where known, `updates` of the finished run with
    these tags, or of `twin`, trained now when there is none yet (None: not trained)."""
    reference = tracker.find_metric(tags, key)
    if reference is None and train_twin is None:
        log.info("no reference run %s in the store, and reference=find: no comparison",
                 dict(tags))
        return None
    if reference is None:
        log.info("no reference run %s yet: training it", dict(tags))
        twin_dir.mkdir(exist_ok=True)
        results = train_twin(twin, twin_choices, twin_dir)
        return {k: results[k] for k in (key, "updates") if k in results}
    found = {key: reference}
    if (updates := tracker.find_metric(tags, "updates")) is not None:
        found["updates"] = updates
    return found
