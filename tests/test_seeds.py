"""A sweep over seeds: the reward error of the seed means, its rliable interval, and the
fp32 seed-to-seed noise floor, as the parent run logs them."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from hetrl.tracking.seeds import seed_reward_errors


def _run(precision: str, seed: int, value: float, status: str = "FINISHED", key: str =
         "eval/return_mean"):
    tags = {"algo": "dqn", "env": "cartpole", "scheduler": "sync", "replay": "uniform",
            "precision": precision, "seed": str(seed), "platform": "host"}
    return SimpleNamespace(info=SimpleNamespace(status=status),
                           data=SimpleNamespace(tags=tags, params={},
                                                metrics={key: value, "return_mean_100": -1.0}))


FP32 = [200.0, 180.0, 220.0, 190.0, 210.0]
MIXED = [210.0, 190.0, 205.0, 200.0, 215.0]


def test_the_error_of_the_seed_means_uses_the_final_evaluations():
    children = [_run("fp32", s, v) for s, v in enumerate(FP32)]
    children += [_run("mixed", s, v) for s, v in enumerate(MIXED)]
    children.append(_run("mixed", 9, 1e6, status="FAILED"))  # not finished: not counted
    text, metrics = seed_reward_errors(children)
    expected = abs(np.mean(MIXED) - np.mean(FP32)) / np.mean(FP32) * 100
    assert metrics["seeds/reward_error_pct"] == pytest.approx(expected)  # 2 %
    assert metrics["seeds/n"] == 5
    assert metrics["seeds/fp32_seed_spread_pct"] == pytest.approx(40 / 200 * 100)
    assert text.splitlines()[0].startswith("setting,precision,seeds")


def test_the_interval_and_the_noise_floor_come_from_rliable():
    pytest.importorskip("rliable")
    children = [_run("fp32", s, v) for s, v in enumerate(FP32)]
    children += [_run("mixed", s, v) for s, v in enumerate(MIXED)]
    _, metrics = seed_reward_errors(children)
    low, high = metrics["seeds/reward_error_ci_low_pct"], metrics["seeds/reward_error_ci_high_pct"]
    assert 0 <= low <= metrics["seeds/reward_error_pct"] <= high
    floor = metrics["seeds/fp32_noise_floor_pct"]
    assert 0 < floor < 20  # fp32 against itself, its runs resampled apart
    assert metrics["seeds/within_noise_floor"] == 1.0  # 2 % is inside seed noise of ±10 %
    again = seed_reward_errors(children)[1]  # a fixed bootstrap seed: the same interval
    assert again["seeds/reward_error_ci_high_pct"] == high


def test_no_error_without_two_common_seeds_of_fp32_and_another_precision():
    assert seed_reward_errors([_run("fp32", 0, 1.0), _run("mixed", 0, 1.0)]) is None
    assert seed_reward_errors([_run("fp32", s, 1.0) for s in range(3)]) is None
