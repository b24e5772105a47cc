"""A sweep over seeds, summed up in its parent run: the reward error of the seed means of each
precision against fp32, with a 95 % stratified-bootstrap interval, beside the fp32
seed-to-seed noise floor (what resampling fp32 runs alone makes of the same error).

The intervals are rliable's (`get_interval_estimates`: percentile intervals of a stratified
bootstrap that resamples runs within each column of a runs x columns score matrix): the
columns are fp32 and the compared precision (or fp32 twice, for the noise floor), so the two
sets of runs are resampled apart (Agarwal et al., "Deep RL at the edge of the statistical
precipice", NeurIPS 2021). A run's return is its final deterministic evaluation
(`eval/return_mean`) when it evaluated, else its final training `return_mean_100`.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import numpy as np

log = logging.getLogger("hetrl")

REPS = 5000  # bootstrap resamples
CONFIDENCE = 0.95
APART = ("seed", "precision", "platform", "partitioner")
"""Tags that do not make another setting: seeds are pooled, precisions compared, and the
platform and partitioner only say where a precision's plan came from (numerics_key)."""


def final_return(run: Any) -> float | None:
    metrics = run.data.metrics
    return metrics.get("eval/return_mean", metrics.get("return_mean_100"))


def change_of_means(scores: np.ndarray) -> float:
    """(mean(column 1) - mean(column 0)) / |mean(column 0)| x 100 of a runs x 2 matrix
    (column 0: fp32): positive where the compared precision scored higher."""
    reference = scores[:, 0].mean()
    return float((scores[:, 1].mean() - reference) / max(abs(reference), 1e-12) * 100)


def error_of_means(scores: np.ndarray) -> np.ndarray:
    """|change_of_means|, as rliable's aggregate functions return it: a 1-element array."""
    return np.array([abs(change_of_means(scores))])


def intervals(scores: dict[str, np.ndarray]) -> dict[str, tuple[float, float]] | None:
    """The 95 % stratified-bootstrap interval of `error_of_means` of each runs x 2 matrix,
    by rliable; None where rliable is not installed (`pip install hetrl[stats]`)."""
    try:
        cis = bootstrap(scores, error_of_means)
    except ImportError:
        log.warning("rliable is not installed (pip install 'hetrl[stats]'): the sweep's seed "
                    "reward error has no interval")
        return None
    return {name: (float(ci[0, 0]), float(ci[1, 0])) for name, ci in cis.items()}


def bootstrap(scores: dict[str, Any], func: Callable[..., np.ndarray],
              reps: int = REPS) -> dict[str, np.ndarray]:
    """rliable's 95 % stratified-bootstrap intervals of `func` (a 2 x k array per name) over
    `reps` resamples,
    reproducible: rliable 1.2 draws its resamples from numpy's global RNG (whatever
    `random_state` it is given), so that is seeded here and put back after, and no job's RNG
    moves. Raises ImportError without rliable."""
    from rliable import library as rly

    saved = np.random.get_state()
    np.random.seed(0)
    try:
        _, cis = rly.get_interval_estimates(scores, func, reps=reps,
                                            confidence_interval_size=CONFIDENCE)
    finally:
        np.random.set_state(saved)
    return cis


def seed_reward_errors(children: Sequence[Any], keys: Sequence[str] = ()
                       ) -> tuple[str, dict[str, float]] | None:
    """A CSV (one row per setting and precision) and the parent's metrics `seeds/*` (with
    `/<k>` per setting where there are several); None without a setting that has fp32 and
    another precision, each on the same two or more seeds (finished runs only)."""
    finals: dict[str, dict[str, dict[str, float]]] = {}  # setting -> precision -> seed -> R
    for run in children:  # oldest first: a later run of the same seed wins
        value = final_return(run)
        if run.info.status != "FINISHED" or value is None:
            continue
        tags = run.data.tags
        setting = ",".join(
            [f"{t}={tags.get(t, '')}" for t in ("algo", "env", "scheduler", "replay")]
            + [f"{k}={run.data.params.get(k, '')}" for k in keys if k not in APART])
        finals.setdefault(setting, {}).setdefault(tags.get("precision", ""), {})[
            tags.get("seed", "")] = float(value)
    rows, scores = [], {}
    for setting, by_precision in finals.items():
        fp32 = by_precision.get("fp32", {})
        for precision, by_seed in sorted(by_precision.items()):
            seeds = sorted(set(fp32) & set(by_seed), key=str)
            if precision == "fp32" or len(seeds) < 2:
                continue
            a = np.array([fp32[s] for s in seeds])
            b = np.array([by_seed[s] for s in seeds])
            k = len(rows)
            scores[f"{k}/error"] = np.stack([a, b], axis=1)
            scores[f"{k}/floor"] = np.stack([a, a], axis=1)
            rows.append((setting, precision, len(seeds), a.mean(), b.mean(),
                         float(error_of_means(scores[f"{k}/error"])[0]),
                         100 * (a.max() - a.min()) / max(abs(a.mean()), 1e-12)))
    if not rows:
        return None
    cis = intervals(scores) or {}
    nan = (float("nan"), float("nan"))
    lines = ["setting,precision,seeds,return_fp32,return,reward_error_pct,ci_low_pct,"
             "ci_high_pct,fp32_noise_floor_pct,within_noise_floor,fp32_seed_spread_pct"]
    metrics: dict[str, float] = {}
    for k, (setting, precision, n, mean_a, mean_b, error, spread) in enumerate(rows):
        low, high = cis.get(f"{k}/error", nan)
        floor = cis.get(f"{k}/floor", nan)[1]  # the upper end: fp32 against itself
        within = error <= floor if np.isfinite(floor) else float("nan")
        lines.append(f'"{setting}",{precision},{n},{mean_a:.6g},{mean_b:.6g},{error:.6g},'
                     f"{low:.6g},{high:.6g},{floor:.6g},{within},{spread:.6g}")
        suffix = "" if len(rows) == 1 else f"/{k}"
        metrics.update({f"seeds/reward_error_pct{suffix}": error,
                        f"seeds/fp32_seed_spread_pct{suffix}": spread,
                        f"seeds/n{suffix}": float(n)})
        if np.isfinite(floor):
            metrics.update({f"seeds/reward_error_ci_low_pct{suffix}": low,
                            f"seeds/reward_error_ci_high_pct{suffix}": high,
                            f"seeds/fp32_noise_floor_pct{suffix}": floor,
                            f"seeds/within_noise_floor{suffix}": float(within)})
    return "\n".join(lines) + "\n", metrics
