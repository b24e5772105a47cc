"""Deterministic evaluation during training (`eval.every`, `eval.episodes`): eval envs of
their own seeds, `eval/return_mean` over steps, and the reward error on the final evaluation."""

from __future__ import annotations

import copy
from functools import partial

import pytest
import torch
from helpers import build_job, metric_history, mlflow_runs, run_job

from hetrl import checkpoint, experiment
from hetrl.evaluation import Evaluator
from hetrl.options import compose_job

OFF_POLICY = ("algo=dqn", "steps=400", "algo.learning_starts=100", "algo.train_freq=4",
              "algo.gradient_steps=1", "algo.hidden=[16,16]", "algo.batch_size=16",
              "log_every=100", "eval.final=0")
ON_POLICY = ("algo=a2c", "env=cartpole", "steps=200", "algo.n_steps=20", "algo.hidden=[16]",
             "log_every=100", "eval.final=0")
"""Tiny jobs; the evaluations during training are what is checked, not the final greedy one
(eval.final, test_agent's)."""


@pytest.mark.parametrize("job", [OFF_POLICY, ON_POLICY], ids=["off_policy", "on_policy"])
def test_the_same_seed_evaluates_to_the_same_returns_and_evaluating_changes_no_training(
        tmp_path, job):
    evaluated = [run_job(tmp_path, *job, "seed=3", "eval.every=100", "eval.episodes=3",
                         "tracking=none") for _ in range(2)]
    plain = run_job(tmp_path, *job, "seed=3", "tracking=none")
    assert evaluated[0]["eval/return_mean"] == evaluated[1]["eval/return_mean"]
    assert "eval/return_mean" not in plain
    # the evaluation leaves every RNG as it was: training is the same with it or without
    for key in ("return_mean_100", "episodes", "updates"):
        assert evaluated[0][key] == plain[key], key


@pytest.mark.parametrize("scheduler", ["actorq", "pearl"])
def test_the_actor_pool_schedulers_evaluate_too(tmp_path, scheduler):
    metrics = run_job(tmp_path, *OFF_POLICY, f"scheduler={scheduler}", "actors=process",
                      "actors.n=1", "eval.every=200", "eval.episodes=2", "tracking=none")
    assert metrics["eval/return_mean"] > 0


def test_evaluations_are_logged_over_steps_and_the_reward_error_stands_on_the_last(tmp_path):
    run_job(tmp_path, *OFF_POLICY, "precision=bf16", "eval.every=200", "eval.episodes=2")
    runs = {r.data.tags["precision"]: r for r in mlflow_runs(tmp_path)}
    assert set(runs) == {"bf16", "fp32"}  # the fp32 twin, evaluated alike
    curve = metric_history(tmp_path, runs["bf16"].info.run_id, "eval/return_mean")
    assert [step for step, _ in curve] == [200, 400]
    reference = runs["fp32"].data.metrics["eval/return_mean"]
    metrics = runs["bf16"].data.metrics
    assert metrics["reward_reference"] == reference  # the twin's final evaluation
    expected = abs(metrics["eval/return_mean"] - reference) / abs(reference) * 100
    assert metrics["reward_error_pct"] == pytest.approx(expected)
    assert "return_mean_100" in metrics  # the training return keeps its own name


def test_the_kept_policy_is_the_best_evaluations_scored_on_episodes_of_its_own(tmp_path):
    run_job(tmp_path, *OFF_POLICY, "steps=600", "eval.every=100", "eval.episodes=3")
    (run,) = mlflow_runs(tmp_path)
    curve = metric_history(tmp_path, run.info.run_id, "eval/return_mean")
    best_step, best = max(curve, key=lambda point: (point[1], -point[0]))  # the first best
    assert run.data.metrics["eval/best_step"] == best_step
    assert run.data.metrics["eval/best_return_mean"] > 0


def test_scoring_the_kept_weights_scores_them_and_leaves_the_learner_as_it_is():
    c = build_job(*OFF_POLICY, "tracking=none")
    evaluator = Evaluator(c.learner, partial(c.make_envs, n_envs=1), episodes=3, seed=0)
    kept = copy.deepcopy(c.learner.state_dict())
    scored = evaluator.best(100, kept)
    with torch.no_grad():  # a policy that always pushes left: the shortest episodes
        c.learner.q[-1].weight.zero_()
        c.learner.q[-1].bias.copy_(torch.tensor([1.0, 0.0]))
    now = copy.deepcopy(c.learner.state_dict())
    assert evaluator()["eval/return_mean"] < 12
    assert evaluator.best(100, kept) == scored == {**scored, "eval/best_step": 100.0}
    assert evaluator.best(100, now) != scored  # the weights given are what is scored
    assert all(torch.equal(now[k], v) for k, v in c.learner.state_dict().items())
    evaluator.close()


def test_a_resumed_run_keeps_the_policy_it_kept_before_the_stop(tmp_path):
    job = (*OFF_POLICY, "eval.every=100", "eval.episodes=2", "tracking=none")
    run_job(tmp_path, *job)  # ends at step 400, its checkpoint in job0
    saved = checkpoint.load(tmp_path / "job0")
    *_, weights = saved["loop"].eval_best
    saved["loop"].eval_best = (100, 1e9, weights)  # a best that no later evaluation beats
    checkpoint.save(tmp_path / "job0" / checkpoint.FILENAME, saved)
    cfg, choices = compose_job("tracking=none", f"resume={tmp_path / 'job0'}", "steps=600")
    resumed = experiment.run(cfg, choices, tmp_path / "resumed")
    assert resumed["eval/best_step"] == 100
