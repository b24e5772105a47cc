"""One seed makes a run repeatable; a stopped job resumes exactly where it stopped."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from helpers import metric_history, mlflow_runs, run_job, tracking_uri

JOB = ("algo=dqn", "env=cartpole", "steps=10000", "algo.learning_starts=500", "algo.train_freq=4",
       "algo.gradient_steps=1", "algo.target_update_interval=100", "log_every=500")


def _returns(tmp_path, run_id):
    return metric_history(tmp_path, run_id, "return_mean_100")


def test_same_seed_same_returns_other_seed_other_returns(tmp_path):
    short = (*JOB, "steps=3000")
    a = run_job(tmp_path, *short, "seed=3")
    b = run_job(tmp_path, *short, "seed=3")
    c = run_job(tmp_path, *short, "seed=4")
    assert _returns(tmp_path, a["run_id"]) == _returns(tmp_path, b["run_id"])
    assert _returns(tmp_path, a["run_id"]) != _returns(tmp_path, c["run_id"])
    assert a["learner/loss"] == b["learner/loss"]


def test_a_stopped_and_resumed_job_ends_with_the_uninterrupted_curve(tmp_path):
    reference = run_job(tmp_path, *JOB)
    expected = _returns(tmp_path, reference["run_id"])

    job_dir = tmp_path / "stopped"
    cli = [sys.executable, "-m", "hetrl", f"tracking.uri={tracking_uri(tmp_path)}"]
    proc = subprocess.Popen([*cli, *JOB, "checkpoint_every=500", f"hydra.run.dir={job_dir}"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    deadline = time.monotonic() + 120
    while not (job_dir / "checkpoint.pt").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, output[-2000:]
    killed = [r for r in mlflow_runs(tmp_path) if r.info.run_id != reference["run_id"]]
    assert [r.info.status for r in killed] == ["KILLED"]
    stopped_at = _returns(tmp_path, killed[0].info.run_id)[-1][0]
    assert stopped_at < 10000  # it really stopped early

    resumed = subprocess.run([*cli, f"resume={job_dir}"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    runs = [r for r in mlflow_runs(tmp_path) if r.info.run_id != reference["run_id"]]
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"  # the same run went on
    assert _returns(tmp_path, runs[0].info.run_id) == expected
