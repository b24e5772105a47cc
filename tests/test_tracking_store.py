"""Many writers on one sqlite store: parallel jobs starting together on a new store."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time

from mlflow.tracking import MlflowClient

from hetrl.tracking.mlflow import client_for, store_uri

WRITER = """
import sys, time
from mlflow.entities import Metric
from hetrl.tracking.mlflow import client_for

uri, start, name = sys.argv[1], float(sys.argv[2]), sys.argv[3]
time.sleep(max(0.0, start - time.time()))  # all writers start at the same moment
client, experiment_id = client_for(uri, "hetrl")
run = client.create_run(experiment_id, run_name=name)
for step in range(0, 1000, 100):
    now = int(time.time() * 1000)
    client.log_batch(run.info.run_id, metrics=[Metric(f"m{k}", float(i), now, i)
                                               for k in range(5) for i in range(step, step + 100)])
client.set_terminated(run.info.run_id, "FINISHED")
"""


def test_eight_jobs_starting_at_once_on_a_new_sqlite_store_lose_no_run(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    start = time.time() + 8  # after the eight interpreters have imported MLflow
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    procs = [subprocess.Popen([sys.executable, str(script), uri, str(start), f"w{n}"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env) for n in range(8)]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    failed = [(p.returncode, out[-1500:]) for p, out in zip(procs, outputs) if p.returncode]
    assert not failed, failed
    assert not any("database is locked" in out for out in outputs)
    client = MlflowClient(store_uri(uri))
    experiment = client.get_experiment_by_name("hetrl")
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(r.info.run_name for r in runs) == [f"w{n}" for n in range(8)]
    assert all(r.info.status == "FINISHED" for r in runs)
    assert all(len(client.get_metric_history(r.info.run_id, "m0")) == 1000 for r in runs)
    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_sqlite_store_uri_gets_a_busy_timeout_once(tmp_path):
    assert store_uri("sqlite:///a.db") == "sqlite:///a.db?timeout=60"
    assert store_uri("sqlite:///a.db?timeout=5") == "sqlite:///a.db?timeout=5"
    assert store_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
    client, experiment_id = client_for(f"sqlite:///{tmp_path / 'm.db'}", "hetrl")
    assert client_for(f"sqlite:///{tmp_path / 'm.db'}", "hetrl")[1] == experiment_id
