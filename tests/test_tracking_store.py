"""Many writers on one sqlite store: parallel jobs starting together on a new store, and a job
creating a store another MLflow client is making."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time

from forks import Forked
from mlflow.tracking import MlflowClient

from hetrl.tracking.empty_store import empty_store
from hetrl.tracking.mlflow import client_for, store_uri

WRITERS = """
import os, sys, time, traceback
from mlflow.entities import Metric
import mlflow.store.tracking.sqlalchemy_store  # noqa: F401 - what a client loads, loaded once
from hetrl.tracking.mlflow import client_for


def write(uri, name):
    client, experiment_id = client_for(uri, "hetrl")
    run = client.create_run(experiment_id, run_name=name)
    for step in range(0, 200, 20):  # ten writes each, as a job's logs are: small batches
        now = int(time.time() * 1000)
        client.log_batch(run.info.run_id, metrics=[Metric(f"m{k}", float(i), now, i)
                                                   for k in range(5) for i in range(step, step + 20)])
    client.set_terminated(run.info.run_id, "FINISHED")


# eight writer processes, forked once MLflow is imported, all released at the same moment:
# the parent closes the pipe they wait on
go, release = os.pipe()
writers = []
for n in range(8):
    if (pid := os.fork()) == 0:
        os.close(release)
        os.read(go, 1)
        try:
            write(sys.argv[1], f"w{n}")
        except BaseException:
            traceback.print_exc()
            sys.stdout.flush()
            os._exit(1)
        sys.stdout.flush()
        os._exit(0)
    writers.append(pid)
os.close(go)
os.close(release)
codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in writers]
print("exit codes", codes)
sys.exit(any(codes))
"""


def test_eight_jobs_starting_at_once_on_a_new_sqlite_store_lose_no_run(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    script = tmp_path / "writers.py"
    script.write_text(WRITERS)
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    out = subprocess.run([sys.executable, str(script), uri], capture_output=True, text=True,
                         env=env, timeout=300)
    output = out.stdout + out.stderr
    assert out.returncode == 0, output[-3000:]
    assert "exit codes [0, 0, 0, 0, 0, 0, 0, 0]" in output
    assert "database is locked" not in output
    client = MlflowClient(store_uri(uri))
    experiment = client.get_experiment_by_name("hetrl")
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(r.info.run_name for r in runs) == [f"w{n}" for n in range(8)]
    assert all(r.info.status == "FINISHED" for r in runs)
    assert all(len(client.get_metric_history(r.info.run_id, "m0")) == 200 for r in runs)
    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_sqlite_store_uri_gets_a_busy_timeout_once(tmp_path):
    assert store_uri("sqlite:///a.db") == "sqlite:///a.db?timeout=60"
    assert store_uri("sqlite:///a.db?timeout=5") == "sqlite:///a.db?timeout=5"
    assert store_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
    client, experiment_id = client_for(f"sqlite:///{tmp_path / 'm.db'}", "hetrl")
    assert client_for(f"sqlite:///{tmp_path / 'm.db'}", "hetrl")[1] == experiment_id


def test_a_job_waits_for_the_schema_an_outside_client_is_making_in_a_new_store(tmp_path):
    """A plain MlflowClient on a new store makes the file and runs MLflow's migrations into it
    (seconds); a job that opens the store meanwhile ran them too and failed (`duplicate column
    name: step`): it waits for them, and both end well on a whole store."""
    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    empty_store()  # the job's copy is made: what it races is the outside client's migrations
    script = tmp_path / "outside.py"
    script.write_text(f"from mlflow.tracking import MlflowClient\n"
                      f"MlflowClient({uri!r}).search_experiments()\n")
    log = tmp_path / "outside.log"
    outside = Forked([str(script)], tmp_path, dict(os.environ), log)
    try:
        while not db.exists() and outside.poll() is None:
            time.sleep(0.001)
        client, experiment_id = client_for(uri, "hetrl")  # as the outside migrates
        assert outside.wait(timeout=120) == 0, log.read_text()[-3000:]
    finally:
        outside.kill()
    assert client.get_experiment(experiment_id).name == "hetrl"
    assert [e.name for e in MlflowClient(uri).search_experiments()] == ["hetrl", "Default"]
