"""One seed makes a run repeatable; a stopped job resumes exactly where it stopped."""

from __future__ import annotations

import signal
import time

import pytest
from helpers import compose_job, hetrl_started, metric_history, mlflow_runs, run_job, tracking_uri
from mlflow.tracking import MlflowClient

from hetrl import checkpoint, experiment
from hetrl.config.errors import ConfigError
from hetrl.options import group_options

JOB = ("algo=dqn", "env=cartpole", "steps=10000", "algo.learning_starts=500", "algo.train_freq=4",
       "algo.gradient_steps=1", "algo.target_update_interval=100", "log_every=500")


def _returns(tmp_path, run_id):
    return metric_history(tmp_path, run_id, "return_mean_100")


def test_same_seed_same_returns_other_seed_other_returns(tmp_path):
    short = (*JOB, "steps=700", "log_every=100", "eval.final=0")  # 50 updates after 500 steps
    a = run_job(tmp_path, *short, "seed=3")
    b = run_job(tmp_path, *short, "seed=3")
    c = run_job(tmp_path, *short, "seed=4")
    assert _returns(tmp_path, a["run_id"]) == _returns(tmp_path, b["run_id"])
    assert _returns(tmp_path, a["run_id"]) != _returns(tmp_path, c["run_id"])
    assert a["learner/loss"] == b["learner/loss"]


EVALUATED = (*JOB, "steps=2000", "algo.learning_starts=250", "log_every=250", "eval.every=250",
             "eval.episodes=2")
"""A job with a log and an evaluation every 250 steps (its kept policy goes on too), as the
stopped and the killed job run it with a checkpoint every 250 or 500 steps: the killed job
has 1,250 steps after the first log past its first checkpoint to be killed in."""


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[dict, list[tuple[int, float]]]:
    """EVALUATED run through without a stop: its final metrics and return curve."""
    store = tmp_path_factory.mktemp("uninterrupted")
    results = run_job(store, *EVALUATED)
    return results, _returns(store, results["run_id"])


def _resume(job_dir, *overrides: str) -> dict:
    """`python -m hetrl resume=<job_dir> <overrides>`, run in this process (tracking to the
    job's store unless `tracking.uri=` moves it)."""
    given = [f"resume={job_dir}", *overrides]
    cfg, choices = compose_job(*given)
    return experiment.run(cfg, choices, job_dir, overrides=given)


def test_a_stopped_and_resumed_job_ends_with_the_uninterrupted_curve(tmp_path, uninterrupted):
    reference, expected = uninterrupted
    job_dir = tmp_path / "stopped"
    log = tmp_path / "out.log"
    proc = hetrl_started(tmp_path, *EVALUATED, "checkpoint_every=250",
                         f"hydra.run.dir={job_dir}", log=log)
    try:
        deadline = time.monotonic() + 120
        while not (job_dir / "checkpoint.pt").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) != 0, log.read_text()[-2000:]
    finally:
        proc.kill()
        proc.wait()
    (killed,) = mlflow_runs(tmp_path)
    assert killed.info.status == "KILLED"
    stopped_at = _returns(tmp_path, killed.info.run_id)[-1][0]
    assert stopped_at < 2000  # it really stopped early
    best_step, _, weights = checkpoint.load(job_dir)["loop"].eval_best  # kept in the checkpoint
    assert 0 < best_step <= stopped_at and "q.0.weight" in weights

    resumed = _resume(job_dir)
    (run,) = mlflow_runs(tmp_path)  # the same run went on
    assert run.info.run_id == resumed["run_id"] and run.info.status == "FINISHED"
    assert _returns(tmp_path, run.info.run_id) == expected
    for key in ("eval/best_step", "eval/best_return_mean"):
        assert run.data.metrics[key] == reference[key], key


def test_a_job_killed_after_a_checkpoint_resumes_bit_for_bit_logging_each_step_once(
        tmp_path, uninterrupted):
    """kill -9 between two checkpoints: the steps after the checkpoint were logged already;
    the resumed job takes them again (the same values) and logs each step once."""
    _, expected = uninterrupted
    job_dir = tmp_path / "killed"
    proc = hetrl_started(tmp_path, *EVALUATED, "checkpoint_every=500",
                         f"hydra.run.dir={job_dir}", log=tmp_path / "out.log")
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            # the store once the job has made it (a client here would race it to the tables)
            runs = (job_dir / "checkpoint.pt").exists() and mlflow_runs(tmp_path)
            if runs:
                logged = metric_history(tmp_path, runs[0].info.run_id, "sps")
                if logged and logged[-1][0] > 500:
                    break
            time.sleep(0.05)
        proc.kill()  # kill -9: no handler runs
        proc.wait(timeout=30)
    finally:
        proc.kill()
    (killed,) = mlflow_runs(tmp_path)
    assert killed.info.status == "RUNNING"  # as kill -9 leaves it
    at = checkpoint.load(job_dir)["loop"].step
    logged_to = metric_history(tmp_path, killed.info.run_id, "sps")[-1][0]
    assert at < logged_to < 2000  # steps after the checkpoint were logged before the kill

    _resume(job_dir)
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "FINISHED"
    steps = [step for step, _ in metric_history(tmp_path, run.info.run_id, "sps")]
    assert steps == list(range(250, 2001, 250))  # each step once
    assert _returns(tmp_path, run.info.run_id) == expected  # bit for bit


def test_resume_applies_a_longer_budget_and_a_moved_store_and_refuses_the_rest(tmp_path):
    """What `python -m hetrl resume=...` applies and refuses, run in this process (a refusal
    is a ConfigError: the command line prints it as one line and exits 1, test_config)."""
    first = run_job(tmp_path, *JOB, "steps=1000", "log_every=250", "eval.final=0")
    job_dir = tmp_path / "job0"

    with pytest.raises(ConfigError) as refused:
        _resume(job_dir, "seed=5", "algo.lr=0.1", "env=cartpole", "steps=2000")
    line = str(refused.value)
    assert "\n" not in line
    assert "seed=5 algo.lr=0.1 would change what it learns" in line  # env=cartpole: unchanged
    assert "steps, log_every, checkpoint_every, tracking.uri" in line
    with pytest.raises(ConfigError, match="steps=500 is invalid"):
        _resume(job_dir, "steps=500")

    moved = tmp_path / "moved"
    moved.mkdir()
    for part in tmp_path.glob("mlflow.db*"):  # the database with its WAL files
        part.rename(moved / part.name)
    _resume(job_dir, "steps=1500", f"tracking.uri={tracking_uri(moved)}")
    assert not (tmp_path / "mlflow.db").exists()  # the moved store, not a new one
    client = MlflowClient(tracking_uri(moved))
    run = client.get_run(first["run_id"])
    assert run.info.status == "FINISHED" and run.data.metrics["updates"] > first["updates"]
    steps = [m.step for m in client.get_metric_history(first["run_id"], "sps")]
    assert steps == [250, 500, 750, 1000, 1250, 1500]


@pytest.mark.parametrize("platform", group_options("platform"))
def test_a_job_resumes_on_every_platform(tmp_path, platform):
    """The saved config is rebuilt with its schemas (a modeled platform's devices and links
    are instantiated as their dataclasses), so a job planned on any platform goes on."""
    first = run_job(tmp_path, "algo=dqn", f"platform={platform}", "precision=mixed",
                    "steps=300", "algo.learning_starts=100", "log_every=100", "eval.final=0",
                    "reference=find")  # its fp32 reference run is not what resumes here
    resumed = _resume(tmp_path / "job0", "steps=600")
    assert resumed["run_id"] == first["run_id"]
    assert resumed["updates"] > first["updates"]  # the tuned DQN trains every 256 env steps


def test_a_checkpoint_from_before_a_run_level_key_existed_resumes_with_its_default(tmp_path):
    first = run_job(tmp_path, *JOB, "steps=600", "log_every=300", "eval.final=0")
    job_dir = tmp_path / "job0"
    state = checkpoint.load(job_dir)
    del state["config"]["reference"]  # as written before `reference` was a key
    checkpoint.save(job_dir / checkpoint.FILENAME, state)
    resumed = _resume(job_dir, "steps=900")
    assert resumed["run_id"] == first["run_id"] and resumed["updates"] > first["updates"]
    assert checkpoint.load(job_dir)["config"]["reference"] == "train"
