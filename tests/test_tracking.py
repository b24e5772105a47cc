"""MLflow runs tell the truth: tags, params, metrics, artifacts, statuses, sweeps."""

from __future__ import annotations

import csv
import json
import logging
import subprocess

import pytest
import torch
import yaml
from helpers import hetrl_cli, mlflow_runs, run_job, tracking_uri

from hetrl.scheduler.sync import SyncScheduler
from hetrl.tracking.metadata import git_state
from hetrl.tracking.mlflow import VIEW_ID, VIEW_NAME, VIEW_TAG, client_for, view_route

QUICK = ("algo=dqn", "env=cartpole", "steps=1200", "algo.learning_starts=200", "algo.train_freq=4",
         "algo.gradient_steps=1", "log_every=300")


def test_a_finished_job_logs_tags_params_metrics_and_artifacts(tmp_path, client):
    result = run_job(tmp_path, *QUICK)
    (run,) = mlflow_runs(tmp_path)
    assert run.info.run_id == result["run_id"] and run.info.status == "FINISHED"
    tags = run.data.tags
    assert {k: tags[k] for k in ("algo", "env", "platform", "precision", "scheduler")} == {
        "algo": "dqn", "env": "cartpole", "platform": "host", "precision": "fp32",
        "scheduler": "sync"}
    params = run.data.params
    assert params["algo.lr"] == "0.0023" and params["steps"] == "1200"
    assert params["env.id"] == "CartPole-v1" and params["host.device"] == "cpu"
    metrics = run.data.metrics
    for key in ("return_mean_100", "sps", "eps_host", "phase/update_pct", "phase/env_s"):
        assert metrics[key] > 0, key
    shares = sum(v for k, v in metrics.items() if k.endswith("_pct"))
    assert 50 < shares <= 100.5  # phases cover most of the loop's wall time
    history = client.get_metric_history(run.info.run_id, "sps")
    assert [m.step for m in history] == [300, 600, 900, 1200]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "learning_curve.png", "checkpoint.pt"} <= artifacts


def test_a_failing_job_ends_failed_with_its_traceback(tmp_path, client, monkeypatch):
    """A job that fails while training (a bad env id is refused before any run: issue 40)."""
    def broken_loop(*args, **kwargs):
        raise RuntimeError("the loop broke")

    monkeypatch.setattr(SyncScheduler, "run", broken_loop)
    with pytest.raises(RuntimeError, match="the loop broke"):
        run_job(tmp_path, *QUICK)
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "FAILED"
    error = client.download_artifacts(run.info.run_id, "error.txt", str(tmp_path))
    assert "the loop broke" in open(error).read()


@pytest.mark.parametrize("bad", [
    "steps=-1", "algo.gamma=2", "+stpes=600", "precision.dtype=int16",
    "tracking.view_columns=[eps_host]", "tracking.uri=file:mlruns",
    # found by making the platform and one env (build.preflight)
    "algo.buffer_size=10000000000", "env.id=Pendulum-v1",  # a continuous env declared discrete
    pytest.param("platform.device=cuda", marks=pytest.mark.skipif(torch.cuda.is_available(),
                                                                  reason="a machine without CUDA")),
])
def test_bad_input_is_rejected_before_a_run_or_store_is_created(tmp_path, bad, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a relative store would be
    with pytest.raises(ValueError, match="is invalid|not a config key|is not modeled|does not match"):
        run_job(tmp_path, *QUICK, bad, ready_store=False)
    assert not (tmp_path / "mlflow.db").exists()  # no run, not even a FAILED one
    assert not (tmp_path / "mlruns").exists()


def test_a_sweep_across_action_spaces_is_one_parent_with_children(tmp_path, client):
    out = hetrl_cli(tmp_path, "-m", "algo=dqn,ddpg", "steps=400", "algo.learning_starts=100",
                    "algo.batch_size=32", "algo.hidden=[32]", "log_every=200")
    assert out.returncode == 0, out.stderr[-3000:]
    runs = mlflow_runs(tmp_path)
    parents = [r for r in runs if r.data.tags.get("sweep") == "true"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    parent_id = parents[0].info.run_id
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent_id]
    assert sorted((c.data.tags["algo"], c.data.tags["env"]) for c in children) == [
        ("ddpg", "pendulum"), ("dqn", "cartpole")]
    assert all(c.info.status == "FINISHED" for c in children)
    artifacts = {a.path for a in client.list_artifacts(parent_id)}
    assert {"summary.csv", "summary.md"} <= artifacts
    summary = open(client.download_artifacts(parent_id, "summary.md", str(tmp_path))).read()
    assert "2 jobs: 2 finished, 0 failed" in summary and "pendulum" in summary
    # the parent is named after what it sweeps and holds the sweep's overrides as params;
    # each child's description is the command that reproduces it
    assert parents[0].info.run_name == "sweep algo=dqn,ddpg"
    assert parents[0].data.params["algo"] == "dqn,ddpg"
    assert parents[0].data.params["algo.hidden"] == "[32]"
    notes = sorted(c.data.tags["mlflow.note.content"] for c in children)
    assert "python -m hetrl" in notes[0] and "algo=ddpg" in notes[0] and "algo=dqn" in notes[1]
    # the parent's description links the runs side by side, and the sweep prints that link
    route = view_route(parents[0].info.experiment_id)
    assert f"[{VIEW_NAME}](#{route})" in parents[0].data.tags["mlflow.note.content"]
    assert f"the runs side by side: http://127.0.0.1:5000/#{route}" in out.stdout + out.stderr


def test_the_experiment_keeps_hetrls_saved_view_of_the_runs_table(tmp_path, client):
    """The view (MLflow UI's Views menu) holds the configured columns, as the UI keys them;
    it is written again only where its columns differ."""
    def view(experiment_id: str) -> tuple[dict, list[str]]:
        envelope = json.loads(client.get_experiment(experiment_id).tags[VIEW_TAG + VIEW_ID])
        return envelope, json.loads(envelope["state"])["selectedColumns"]

    uri = tracking_uri(tmp_path)
    _, experiment_id = client_for(uri, "hetrl", ["tags.platform", "metrics.eps_host"])
    first, columns = view(experiment_id)
    assert first["name"] == VIEW_NAME and columns == ["tags.`platform`", "metrics.`eps_host`"]
    client_for(uri, "hetrl", ["tags.platform", "metrics.eps_host"])
    assert view(experiment_id)[0] == first  # not written again
    client_for(uri, "hetrl", ["params.algo.lr"])
    assert view(experiment_id)[1] == ["params.`algo.lr`"]
    client_for(uri, "hetrl")  # a client that names no columns leaves the view as it is
    assert view(experiment_id)[1] == ["params.`algo.lr`"]


def test_reference_runs_a_sweep_trained_are_children_but_not_its_jobs(tmp_path, client):
    """The fp32 run a bf16 job trains for its reward error is a child of the parent, tagged
    with the job's run id, and counted apart: the summary and the report list the jobs."""
    out = hetrl_cli(tmp_path, "-m", *QUICK, "precision=bf16,fp16", "algo.hidden=[32]")
    assert out.returncode == 0, out.stderr[-3000:]
    runs = mlflow_runs(tmp_path)
    (parent,) = [r for r in runs if r.data.tags.get("sweep") == "true"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    by_precision = {c.data.tags["precision"]: c for c in children}
    assert len(children) == 3 and set(by_precision) == {"bf16", "fp16", "fp32"}
    reference = by_precision["fp32"]  # trained by the first job, found by the second
    assert reference.data.tags["reference_for"] == by_precision["bf16"].info.run_id
    summary = open(client.download_artifacts(parent.info.run_id, "summary.md", str(tmp_path))).read()
    assert "2 jobs: 2 finished" in summary and "1 reference runs" in summary
    assert reference.info.run_name not in summary
    assert parent.data.metrics["jobs"] == 2
    html = open(client.download_artifacts(parent.info.run_id, "report/report.html",
                                          str(tmp_path))).read()
    assert by_precision["bf16"].info.run_name in html and reference.info.run_name not in html


LAUNCHERS = {  # a launcher that runs jobs outside this process, and what it prints
    "joblib": (("hydra/launcher=joblib", "hydra.launcher.n_jobs=2"), "Joblib.Parallel(n_jobs=2"),
    # submitit's local executor: each job a task of its own (the path a SLURM sweep takes,
    # hydra/launcher=submitit_slurm, less the cluster)
    "submitit_local": (("hydra/launcher=submitit_local",), "Submitit 'local' sweep output dir"),
}


@pytest.mark.slow
@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_a_sweep_in_other_processes_is_one_parent_with_a_child_per_job(tmp_path, client,
                                                                        launcher):
    """Jobs run by the launcher find the parent through their config, not this process's
    environment; the parent closes FINISHED with its summary, nothing left RUNNING."""
    if launcher == "submitit_local":
        pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    flags, printed = LAUNCHERS[launcher]
    out = hetrl_cli(tmp_path, "-m", *flags, "algo=dqn,ddpg", "steps=400",
                    "algo.learning_starts=100", "algo.batch_size=32", "algo.hidden=[32]",
                    "log_every=200", "tracking.system_metrics_s=0")
    assert out.returncode == 0, out.stderr[-3000:]
    assert printed in out.stdout + out.stderr
    runs = mlflow_runs(tmp_path)
    (parent,) = [r for r in runs if r.data.tags.get("sweep") == "true"]
    assert parent.info.status == "FINISHED" and parent.info.run_name == "sweep algo=dqn,ddpg"
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(runs) == 3 and sorted(c.data.tags["algo"] for c in children) == ["ddpg", "dqn"]
    assert all(c.info.status == "FINISHED" for c in children)
    # numbered as Hydra numbered the jobs (algo=dqn,ddpg: ddpg is job 1), wherever they ran
    assert {c.data.tags["algo"]: c.data.tags["job_num"] for c in children} == {
        "dqn": "0", "ddpg": "1"}
    summary = open(client.download_artifacts(parent.info.run_id, "summary.md", str(tmp_path))).read()
    assert "2 jobs: 2 finished, 0 failed, 0 killed, 0 not started" in summary
    # the id travels as an override, kept out of the command that reproduces a job
    assert "parent_run_id" not in children[0].data.tags["mlflow.note.content"]


@pytest.mark.slow
def test_a_joblib_sweep_rejected_before_any_job_runs_leaves_no_run(tmp_path):
    out = hetrl_cli(tmp_path, "-m", "hydra/launcher=joblib", "algo=dqn,dqnn", *QUICK[1:],
                    timeout=120)
    assert out.returncode != 0 and "dqnn" in out.stderr, out.stderr[-3000:]
    assert not (tmp_path / "mlflow.db").exists() or mlflow_runs(tmp_path) == []


def test_the_terminal_and_mlflow_say_what_the_run_is_and_where(tmp_path, client, caplog):
    """Start line and end summary; MLflow's system tags, description and system metrics;
    the platform's tables as platform.yaml, not as params."""
    with caplog.at_level(logging.INFO, logger="hetrl"):
        result = run_job(tmp_path, *QUICK, "platform=versal", "partitioner=heft",
                         "tracking.system_metrics_s=0.5")
    (run,) = mlflow_runs(tmp_path)
    run_id, experiment_id = run.info.run_id, run.info.experiment_id
    lines = [r.getMessage() for r in caplog.records if r.name == "hetrl"]
    url = f"http://127.0.0.1:5000/#/experiments/{experiment_id}/runs/{run_id}"
    start, end = lines[0], lines[-1]
    for part in ("dqn-cartpole-versal-fp32-s0", "1,200 env steps", "learning_starts 200",
                 "job0", run_id, url, "mlflow ui --backend-store-uri sqlite:///"):
        assert part in start, (part, start)
    assert "finished: return_mean_100" in end and "checkpoint.pt" in end and url in end
    assert f"{result['return_mean_100']:.4g}" in end

    tags = run.data.tags
    assert tags["mlflow.user"] and tags["mlflow.source.name"] == "python -m hetrl"
    assert tags["mlflow.source.type"] == "LOCAL"
    assert len(tags["mlflow.source.git.commit"]) == 40 and len(tags["config.git.commit"]) == 40
    assert tags["mlflow.source.git.dirty"] in ("true", "false")
    assert "dqn-cartpole-versal-fp32-s0" in tags["mlflow.note.content"]  # and its command
    experiment_ = client.get_experiment(experiment_id)
    assert experiment_.tags["mlflow.experimentKind"] == "custom_model_development"

    assert any(k.startswith("system/cpu_utilization") for k in run.data.metrics)
    assert any(k.startswith("system/system_memory_usage") for k in run.data.metrics)

    params = run.data.params
    assert not [k for k in params if k.startswith(("platform.devices", "platform.links",
                                                   "platform.baselines"))]
    assert params["platform.host"] == "ps" and params["algo.lr"] == "0.0023"
    assert len(params) < 80  # the config, not the platform's tables (hundreds)
    platform = yaml.safe_load(open(client.download_artifacts(run_id, "platform.yaml",
                                                             str(tmp_path))))
    assert platform["devices"]["aie"]["rates"]["bfloat16"] == 7.7e12
    assert platform["links"][0]["between"] == ["ps", "pl"]


def test_tracking_tensorboard_writes_scalars_readable_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from hetrl import experiment
    from hetrl.options import compose_job

    cfg, choices = compose_job(*QUICK, "tracking=tensorboard",
                               f"tracking.logdir={tmp_path / 'tb'}")
    result = experiment.run(cfg, choices, tmp_path)
    (folder,) = (tmp_path / "tb").iterdir()
    assert result["run_id"] == str(folder)
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "images": 0}).Reload()
    assert [e.step for e in events.Scalars("sps")] == [300, 600, 900, 1200]
    assert events.Scalars("return_mean_100")[-1].value == pytest.approx(
        result["return_mean_100"])
    assert "learning_curve" in events.Tags()["images"]
    assert {"params", "tags", "config.yaml"} <= set(events.Tags()["tensors"]) | {
        t.split("/")[0] for t in events.Tags()["tensors"]}
    assert (folder / "artifacts" / "checkpoint.pt").exists()
    assert (folder / "artifacts" / "learning_curve.png").exists()


def test_a_sweep_rejected_before_any_job_runs_leaves_no_run(tmp_path):
    out = hetrl_cli(tmp_path, "-m", "algo=dqn,dqnn", *QUICK[1:], timeout=120)
    assert out.returncode != 0 and "dqnn" in out.stderr, out.stderr[-3000:]
    assert not (tmp_path / "mlflow.db").exists() or mlflow_runs(tmp_path) == []


SIGTERM_AFTER_FIRST_JOB = """
import os
import signal

from hydra.experimental.callback import Callback


class SigtermAfterFirstJob(Callback):
    def on_job_end(self, config, job_return, **kwargs):
        if config.hydra.job.num == 0:
            os.kill(os.getpid(), signal.SIGTERM)  # between job 0 and job 1
"""


def test_a_sigterm_between_jobs_ends_the_parent_killed_listing_every_job(tmp_path, client):
    (tmp_path / "between_jobs.py").write_text(SIGTERM_AFTER_FIRST_JOB)
    out = hetrl_cli(tmp_path, "-m", *QUICK, "steps=300", "seed=0,1,2",
                    "+hydra.callbacks.sigterm._target_=between_jobs.SigtermAfterFirstJob",
                    timeout=300)
    assert out.returncode == 143, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    assert out.stderr.splitlines()[-1].startswith("stopped by SIGTERM between two jobs")
    runs = mlflow_runs(tmp_path)
    (parent,) = [r for r in runs if r.data.tags.get("sweep") == "true"]
    assert parent.info.status == "KILLED"
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert [c.info.status for c in children] == ["FINISHED"]
    summary, rows = _summary(client, parent.info.run_id, tmp_path)
    assert "3 jobs: 1 finished, 0 failed, 0 killed, 2 not started" in summary
    assert [(row["job"], row["seed"], row["status"], row["steps"]) for row in rows] == [
        ("0", "0", "FINISHED", "300"), ("1", "1", "NOT_STARTED", "300"),
        ("2", "2", "NOT_STARTED", "300")]


def _summary(client, parent_id: str, tmp_path) -> tuple[str, list[dict[str, str]]]:
    """The parent's summary.md and the rows of its summary.csv."""
    text = open(client.download_artifacts(parent_id, "summary.md", str(tmp_path))).read()
    with open(client.download_artifacts(parent_id, "summary.csv", str(tmp_path))) as f:
        return text, list(csv.DictReader(f))


@pytest.mark.parametrize("flags", [pytest.param((), id="basic"), pytest.param(
    LAUNCHERS["joblib"][0], id="joblib", marks=pytest.mark.slow)])
def test_a_job_validation_rejects_is_listed_with_its_error_and_fails_the_sweep(tmp_path, client,
                                                                              flags):
    """A rejected job ran and failed at once: no run of its own, REJECTED in the summary with
    its error and counted among the failures; the others run, the parent ends FAILED, the
    sweep exits 1 (a launcher's worker records the rejection where the launcher reads it).
    Any input the job's checks refuse takes this path (an unknown env.id as algo.lr=-1: the
    refusals themselves are test_input_checks')."""
    out = hetrl_cli(tmp_path, "-m", *flags, *QUICK, "steps=300", "algo.lr=-1,0.001",
                    "tracking.system_metrics_s=0", timeout=300)
    assert out.returncode == 1, out.stderr[-3000:]
    assert "error: job 0: algo.lr=-1.0 is invalid" in out.stderr
    assert "Traceback" not in out.stderr
    runs = mlflow_runs(tmp_path)
    (parent,) = [r for r in runs if r.data.tags.get("sweep") == "true"]
    assert parent.info.status == "FAILED"
    (child,) = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert child.info.status == "FINISHED" and child.data.tags["job_num"] == "1"
    summary, rows = _summary(client, parent.info.run_id, tmp_path)
    assert summary.startswith(
        "2 jobs: 1 finished, 1 failed (1 rejected before they ran), 0 killed, 0 not started")
    assert [(row["job"], row["algo.lr"], row["status"], row["run"]) for row in rows] == [
        ("0", "-1", "REJECTED", ""), ("1", "0.001", "FINISHED", child.info.run_name)]
    assert rows[0]["error"].startswith("algo.lr=-1.0 is invalid") and rows[1]["error"] == ""
    assert rows[0]["error"] in summary
    metrics = parent.data.metrics
    assert (metrics["jobs_failed"], metrics["jobs_rejected"], metrics["jobs_not_started"]) == (
        1, 1, 0)


def test_a_sweep_whose_every_job_is_rejected_leaves_no_run_and_names_each_error(tmp_path):
    out = hetrl_cli(tmp_path, "-m", *QUICK, "algo.lr=-1,-2", timeout=120)
    assert out.returncode == 1, out.stderr[-3000:]
    errors = [line.split(" is invalid")[0] for line in out.stderr.splitlines()
              if line.startswith("error: ")]
    assert errors == ["error: job 0: algo.lr=-1.0", "error: job 1: algo.lr=-2.0"]
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "mlflow.db").exists() or mlflow_runs(tmp_path) == []


def test_a_results_file_that_grows_as_the_code_runs_leaves_the_tree_clean(tmp_path):
    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                       cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "results").mkdir()
    ledger, code = tmp_path / "results" / "ledger.jsonl", tmp_path / "code.py"
    ledger.write_text("{}\n")
    code.write_text("x = 1\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "first")
    ledger.write_text("{}\n{}\n")
    assert git_state(tmp_path)["dirty"] == "true"
    assert git_state(tmp_path, ignore=ledger)["dirty"] == "false"
    code.write_text("x = 2\n")
    assert git_state(tmp_path, ignore=ledger)["dirty"] == "true"
