"""A sweep through a real tracking server (`python -m hetrl.tracking.server up`: `mlflow server` on
sqlite always, on PostgreSQL where it is installed), read back through the server; nothing
is left running after `down`."""

from __future__ import annotations

import http.server
import re
import threading
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from hetrl.faults import Fault
from hetrl.report.__main__ import main as report_main
from hetrl.tracking import mlflow as tracking
from hetrl.tracking.server import postgres_missing

from helpers import NOT_MEASURED, hetrl_cli, tracking_server, tracking_server_up


@pytest.fixture(params=["sqlite", "postgresql"])
def server(request):
    """A tracking server on each backend (PostgreSQL where it is installed)."""
    if request.param == "postgresql" and (missing := postgres_missing()):
        pytest.skip(missing)
    with tracking_server_up(request.param) as up:
        yield up


@pytest.mark.slow
def test_a_sweep_lands_whole_through_the_tracking_server(server, tmp_path):
    uri, folder = server
    out = hetrl_cli(tmp_path, "-m", "algo=dqn", "seed=0,1", "steps=300",
                    "algo.learning_starts=100", "algo.batch_size=32", "algo.hidden=[16]",
                    "log_every=100", *NOT_MEASURED, uri=uri, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "View run" not in out.stdout  # hetrl names the run itself, MLflow does not
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("hetrl")
    assert experiment.artifact_location.startswith("mlflow-artifacts:")  # uploaded to it
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("sweep") == "true"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(runs) == 3 and len(children) == 2
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["jobs_finished"] == 2
    assert {r.data.tags["seed"] for r in children} == {"0", "1"}
    for child in children:
        assert child.info.status == "FINISHED"
        assert child.data.params["algo.batch_size"] == "32"
        steps = [m.step for m in client.get_metric_history(child.info.run_id,
                                                           "return_mean_100")]
        assert steps == [100, 200, 300]
        logged = {a.path for a in client.list_artifacts(child.info.run_id)}
        assert {"checkpoint.pt", "config.yaml", "plan.json", "learning_curve.png"} <= logged
    logged = {a.path for a in client.list_artifacts(parent.info.run_id)}
    report = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert {"summary.csv", "summary.md", "report"} <= logged
    assert {"report/report.html", "report/pareto.png"} <= report
    summary = Path(client.download_artifacts(parent.info.run_id, "summary.md", str(tmp_path)))
    assert "2 jobs: 2 finished" in summary.read_text()
    # on the server's machine, in its folder; nothing in the jobs' working directory
    assert list((folder / "artifacts").rglob("report.html"))
    assert not (tmp_path / "mlartifacts").exists() and not (tmp_path / "mlflow.db").exists()
    # made again from the sweep's folder, found through the server
    sweep_dir = tmp_path / parent.data.tags["sweep_dir"]
    copy = tmp_path / "copy"
    assert report_main([str(sweep_dir), "--tracking-uri", uri, "--out", str(copy)]) == 0
    assert (copy / "report.html").is_file()


def test_status_and_down_of_a_server_that_is_not_up(tmp_path):
    status = tracking_server("status", "--dir", str(tmp_path))
    assert status.returncode == 3 and "not up" in status.stdout
    down = tracking_server("down", "--dir", str(tmp_path))
    assert down.returncode == 0 and "not up" in down.stdout


def test_a_tracking_uri_that_does_not_answer_is_named_at_once(monkeypatch, capsys):
    monkeypatch.setattr(tracking, "SERVER_WAIT_S", 1.0)
    monkeypatch.setattr(tracking, "_SILENT", set())
    uri = f"http://127.0.0.1:{free_port()}"
    began = time.monotonic()
    with pytest.raises(Fault, match=re.escape(f"tracking.uri={uri} does not answer "
                                              "(connection refused)")) as error:
        tracking.client_for(uri, "hetrl")
    assert "python -m hetrl.tracking.server up" in str(error.value)
    assert time.monotonic() - began < 10  # MLflow's own client retries for minutes
    began = time.monotonic()
    with pytest.raises(Fault):  # asked again in the same process: no second wait
        tracking.client_for(uri, "hetrl")
    assert time.monotonic() - began < 1
    assert report_main(["0123456789abcdef", "--tracking-uri", uri]) == 1
    assert f"--tracking-uri {uri} does not answer" in capsys.readouterr().err


def test_a_server_that_is_not_mlflow_is_named():
    handler = type("NotFound", (http.server.BaseHTTPRequestHandler,),
                   {"log_message": lambda *a: None})  # answers 501 to every GET
    web = http.server.HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{web.server_address[1]}"
    try:
        with pytest.raises(Fault, match=re.escape(f"tracking.uri={uri} answered HTTP 501, not "
                                                  "as an MLflow tracking server")):
            tracking.client_for(uri, "hetrl")
    finally:
        web.shutdown()
        web.server_close()


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
