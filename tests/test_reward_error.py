"""reward_error_pct compares a run with the fp32 run of the same numerics: found or trained."""

from __future__ import annotations

import pytest
from helpers import compose_job, mlflow_runs, run_job

from hetrl.evaluation import reward_error_pct
from hetrl.tracking.base import NullTracker
from hetrl.tracking.reward_error import reference_metrics

JOB = ("algo=dqn", "steps=600", "algo.learning_starts=200", "algo.train_freq=4",
       "algo.gradient_steps=1", "algo.hidden=[32]", "log_every=200", "eval.final=0")
"""100 updates, the reward error on the final training return (no final greedy evaluation:
not what is compared)."""

NO_TRACKING = NullTracker(None, None)  # keeps nothing


def test_the_fp32_reference_is_trained_once_then_reused(tmp_path):
    first = run_job(tmp_path, *JOB, "precision=bf16")
    runs = mlflow_runs(tmp_path)
    assert sorted(r.data.tags["precision"] for r in runs) == ["bf16", "fp32"]
    (reference,) = [r for r in runs if r.data.tags["precision"] == "fp32"]
    assert reference.data.tags["reference_for"] == first["run_id"]  # not a job of its own
    expected = reward_error_pct(first["return_mean_100"],
                                reference.data.metrics["return_mean_100"])
    assert first["reward_error_pct"] == pytest.approx(expected)

    second = run_job(tmp_path, *JOB, "precision=fp16")
    assert len(mlflow_runs(tmp_path)) == 3  # no second fp32 run
    assert second["reward_error_pct"] >= 0
    fp32 = run_job(tmp_path, *JOB, "precision=fp32")
    assert "reward_error_pct" not in fp32
    assert fp32["return_mean_100"] == reference.data.metrics["return_mean_100"]  # same seed


def test_other_numerics_are_not_a_reference(tmp_path):
    run_job(tmp_path, *JOB, "precision=fp32", "seed=1")
    run_job(tmp_path, *JOB, "precision=bf16")  # seed 0: needs its own fp32 run
    assert sorted(r.data.tags["precision"] for r in mlflow_runs(tmp_path)) == [
        "bf16", "fp32", "fp32"]


def _twin(updates: float):
    def train(cfg, choices, out_dir):
        return {"return_mean_100": 10.0, "updates": updates}
    return train


@pytest.mark.parametrize(("own", "twin"), [(0.0, 5.0), (5.0, 0.0)])
def test_no_reward_error_when_either_run_made_no_update(tmp_path, own, twin):
    cfg, choices = compose_job("precision=bf16", "tracking=none")
    results = {"return_mean_100": 12.0, "updates": own}
    metrics = reference_metrics(cfg, choices, results, [], [], tmp_path, NO_TRACKING,
                                train_twin=_twin(twin))
    assert "reward_error_pct" not in metrics
    both = reference_metrics(cfg, choices, {**results, "updates": 5.0}, [], [], tmp_path,
                             NO_TRACKING, train_twin=_twin(5.0))
    assert both["reward_error_pct"] == pytest.approx(20.0)


@pytest.mark.parametrize("job", [("precision=bf16",),
                                 ("scheduler=actorq", "actors.precision=int8")])
def test_reference_find_trains_no_twin(tmp_path, job):
    cfg, choices = compose_job(*job, "tracking=none")
    results, history = {"return_mean_100": 12.0, "updates": 5.0}, [(100, 12.0)]
    trained = reference_metrics(cfg, choices, results, history, [1.0], tmp_path, NO_TRACKING,
                                train_twin=_twin(5.0))
    assert {"reward_reference", "reward_fp32_actors"} & trained.keys()
    cfg.reference = "find"
    assert reference_metrics(cfg, choices, results, history, [1.0], tmp_path, NO_TRACKING,
                             train_twin=_twin(5.0)) == {}


def test_reference_find_compares_with_a_reference_in_the_store(tmp_path):
    alone = run_job(tmp_path, *JOB, "precision=bf16", "reference=find")
    assert "reward_error_pct" not in alone
    assert [r.data.tags["precision"] for r in mlflow_runs(tmp_path)] == ["bf16"]
    fp32 = run_job(tmp_path, *JOB, "precision=fp32")
    found = run_job(tmp_path, *JOB, "precision=bf16", "reference=find")
    assert found["reward_reference"] == fp32["return_mean_100"]
    assert found["reward_error_pct"] == pytest.approx(
        reward_error_pct(found["return_mean_100"], fp32["return_mean_100"]))
    assert len(mlflow_runs(tmp_path)) == 3
