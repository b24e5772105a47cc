"""The store is watched: a job whose sqlite store is deleted or replaced, or whose tracking
server goes away, while it runs stops at its next log with a checkpoint and names the store,
never "finished" over lost records;
a resumed run that finishes drops the error.txt of the failure it resumed from."""

from __future__ import annotations

import logging
import shutil
import socket
import time
from pathlib import Path

import pytest
from helpers import (compose_job, hetrl_started, mlflow_runs, run_job, tracking_server,
                     tracking_server_up, tracking_uri)
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

import hetrl.tracking.mlflow  # noqa: F401 - what sets the client's retries, as a job has it
from hetrl import checkpoint, experiment
from hetrl.faults import StoreLost
from hetrl.tracking.empty_store import empty_store
from hetrl.tracking.store_watch import StoreWatch
from hetrl.progress import TrainingProgress

QUICK = ("algo=dqn", "env=cartpole", "steps=400", "algo.learning_starts=100", "log_every=100",
         "checkpoint_every=100", "platform.measure_layers=false", "tracking.system_metrics_s=0")


def _at_step(monkeypatch, step: int, action) -> None:
    """Do `action` when the job logs `step` (as a person or another program would then)."""
    class Acting(TrainingProgress):
        def update(self, at, metrics, kind):
            super().update(at, metrics, kind)
            if at == step:
                action()

    monkeypatch.setattr(experiment, "TrainingProgress", Acting)


@pytest.mark.parametrize("replaced", [False, True], ids=["deleted", "replaced"])
def test_a_store_that_vanishes_stops_the_job_at_its_next_log_with_a_checkpoint(
        tmp_path: Path, monkeypatch, replaced: bool):
    store = tmp_path / "mlflow.db"

    def lose_store() -> None:
        store.unlink()
        if replaced:  # a fresh store where the job's was
            shutil.copyfile(empty_store(), store)

    _at_step(monkeypatch, 200, lose_store)
    with pytest.raises(StoreLost) as lost:
        run_job(tmp_path, *QUICK)
    message = str(lost.value)
    how = "replaced by another file" if replaced else "deleted"
    assert f"the store {store} was {how} while the job ran" in message
    assert "the job stopped at step 300, its checkpoint" in message
    assert checkpoint.load(tmp_path / "job0")["loop"].step == 300


@pytest.mark.slow
def test_a_tracking_server_that_goes_away_stops_the_job_with_a_checkpoint(tmp_path: Path):
    """The server is stopped while the job trains: the job stops at its next log, exits 1
    naming the server and what to do, and never says "finished"."""
    log = tmp_path / "out.log"
    with tracking_server_up("sqlite") as (uri, folder):
        job = hetrl_started(tmp_path, *QUICK, "steps=100000", "compile=false",
                            "hydra.run.dir=job", uri=uri, log=log)
        try:
            deadline = time.monotonic() + 120
            while "step 200/" not in log.read_text() and job.poll() is None \
                    and time.monotonic() < deadline:
                time.sleep(0.1)  # the job logs step 200: it trains, tracking to the server
            down = tracking_server("down", "--dir", str(folder), timeout=120)
            assert down.returncode == 0, down.stdout + down.stderr
            job.wait(timeout=120)
        finally:
            job.kill()
            job.wait()
    output = log.read_text()
    assert job.returncode == 1, output[-3000:]
    (error,) = [line for line in output.splitlines() if line.startswith("error: ")]
    assert f"tracking.uri={uri}: the tracking server stopped answering" in error
    assert "python -m hetrl.tracking.server up" in error and "resume=" in error
    assert "the job stopped at step" in error and "finished" not in output
    assert "Traceback" not in output
    assert (tmp_path / "job" / "checkpoint.pt").is_file()


def test_a_write_to_a_server_gone_since_the_stores_look_is_named_in_seconds(caplog):
    """The server went away between the store's look and a write (nothing listens at its
    port): MLflow's client retries the refused write twice, in 2-4 s, not 7 times over ~4
    minutes; then the store is named lost, with the run that stays RUNNING there and how to
    go on or end it."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        uri = f"http://127.0.0.1:{free.getsockname()[1]}"
    watch, run_id = StoreWatch(uri), "0" * 32
    watch.run_id = run_id
    with caplog.at_level(logging.WARNING, "urllib3.connectionpool"), \
            pytest.raises(StoreLost) as lost, watch.writing():
        MlflowClient(uri).log_batch(run_id, metrics=[Metric("m", 1.0, 0, 0)])
    assert len([r for r in caplog.records if r.getMessage().startswith("Retrying")]) == 2
    message = str(lost.value)
    assert f"tracking.uri={uri}: the tracking server stopped answering (connection refused)" \
        in message
    assert f"its MLflow run {run_id} stays RUNNING there until resumed or ended" in message
    assert "python -m hetrl.tracking.server up" in message and "resume=" in message
    assert f"MlflowClient('{uri}').set_terminated('{run_id}', 'KILLED')" in message


def test_a_resumed_run_that_finishes_drops_the_error_of_its_failure(tmp_path: Path, monkeypatch):
    def fail() -> None:
        raise RuntimeError("a fault after the checkpoint at step 200")

    _at_step(monkeypatch, 300, fail)
    with pytest.raises(RuntimeError, match="a fault after"):
        run_job(tmp_path, *QUICK)
    monkeypatch.undo()
    (failed,) = mlflow_runs(tmp_path)
    client = MlflowClient(tracking_uri(tmp_path))
    assert failed.info.status == "FAILED"
    assert "error.txt" in [f.path for f in client.list_artifacts(failed.info.run_id)]

    cfg, choices = compose_job(f"tracking.uri={tracking_uri(tmp_path)}",
                               f"resume={tmp_path / 'job0'}")
    experiment.run(cfg, choices, tmp_path / "job0")
    (resumed,) = mlflow_runs(tmp_path)
    assert resumed.info.status == "FINISHED"
    assert "error.txt" not in [f.path for f in client.list_artifacts(resumed.info.run_id)]
