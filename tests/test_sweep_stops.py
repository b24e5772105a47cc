"""Stops reach every job of a parallel sweep: SIGTERM to the launching process, or Ctrl-C (SIGINT
to the whole process group), under hydra/launcher=joblib and submitit_local. Each running job
checkpoints and ends KILLED, queued jobs never start (the parent's summary lists them, matched
by their overrides), the parent ends KILLED, the launching process exits 143 or 130 once its
jobs are done, and no process of the sweep outlives it."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from forks import Forked
from helpers import hetrl_started, mlflow_runs, run_job, tracking_uri
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from hetrl.faults import Stopped
from hetrl.sweep.mlflow import _not_started

# jobs that run until stopped; each is tiny and built at once (its update neither timed for
# compile=auto, which would compile a 1M-step budget on a machine that never did, nor its
# layers measured): a stop meets it in its loop, whatever it learns
LONG = ("algo=dqn", "steps=1000000", "algo.learning_starts=100", "algo.hidden=[16]",
        "log_every=1000", "tracking.system_metrics_s=0", "compile=false",
        "platform.measure_layers=false")


def _start(tmp_path: Path, *args: str) -> tuple[Forked, Path]:
    """`python -m hetrl -m <args>` in a session of its own (a Ctrl-C reaches its group only)."""
    log = tmp_path / "out.log"
    return hetrl_started(tmp_path, "-m", *args, log=log), log


def _wait_running(sweep: Forked, log: Path, n: int, timeout: float = 120) -> None:
    """Until `n` jobs' runs are RUNNING (the store exists once the sweep dir is announced)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and sweep.poll() is None:
        if "sweep output dir" in log.read_text():
            try:
                running = [r for r in mlflow_runs(log.parent) if r.info.status == "RUNNING"
                           and "mlflow.parentRunId" in r.data.tags]
            except Exception:  # noqa: BLE001 - the store is being written
                running = []
            if len(running) >= n:
                return
        time.sleep(0.3)
    raise AssertionError(f"{n} jobs never ran together:\n{log.read_text()[-3000:]}")


def _stop(sweep: Forked, log: Path, signum: int, group: bool) -> list:
    """Send `signum` (to the whole group: a Ctrl-C); the processes the sweep had then."""
    processes = psutil.Process(sweep.pid).children(recursive=True)
    (os.killpg if group else os.kill)(sweep.pid, signum)
    try:
        sweep.wait(timeout=120)
    finally:
        sweep.kill()
    return processes


def _outlived(processes: list, timeout: float = 15) -> list:
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for process in processes:
            try:
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    alive.append(process)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            for process in alive:
                process.kill()
            return alive
        time.sleep(0.3)


def _summary(tmp_path: Path, parent) -> list[dict]:
    client = MlflowClient(tracking_uri(tmp_path))
    with open(client.download_artifacts(parent.info.run_id, "summary.csv", str(tmp_path))) as f:
        return list(csv.DictReader(f))


def _check_stopped(tmp_path: Path, log: Path, code: int, returncode: int, outlived: list,
                   seeds: set[str]) -> None:
    """Each running job checkpointed and ended KILLED; the others never started."""
    text = log.read_text()
    assert returncode == code, text[-3000:]
    assert not outlived, [p.pid for p in outlived]
    runs = mlflow_runs(tmp_path)
    (parent,) = [r for r in runs if r.data.tags.get("sweep") == "true"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert parent.info.status == "KILLED"
    assert len(children) == 2 and {c.info.status for c in children} == {"KILLED"}
    (sweep_dir,) = {p.parent for p in tmp_path.glob("runs/multirun/*/*/STOPPED")}
    rows = _summary(tmp_path, parent)
    ran = {c.data.tags["seed"] for c in children}
    # every job has its row, by Hydra's number: the ones that ran by their run's tag
    assert sorted(r["job"] for r in rows) == [str(n) for n in range(len(seeds))]
    assert {r["job"] for r in rows if r["status"] == "KILLED"} == {
        c.data.tags["job_num"] for c in children}
    assert sorted((r["seed"], r["status"]) for r in rows) == sorted(
        [(s, "KILLED") for s in ran] + [(s, "NOT_STARTED") for s in seeds - ran])
    for row in rows:  # a job that ran has its checkpoint; one that did not start, none
        if row["status"] == "NOT_STARTED":
            num = row["job"]
            assert not (sweep_dir / num / "checkpoint.pt").exists()
    assert len(list(sweep_dir.glob("*/checkpoint.pt"))) == len(children)
    # its report is the table: no job finished, no picture drawn
    report = MlflowClient(tracking_uri(tmp_path)).list_artifacts(parent.info.run_id, "report")
    assert [a.path for a in report] == ["report/report.html"]
    assert "Traceback" not in text, text[-3000:]
    name = signal.Signals(code - 128).name
    assert text.splitlines()[-1].startswith(f"stopped by {name}: the sweep's running jobs"), text


@pytest.mark.slow
@pytest.mark.parametrize("signum,group", [(signal.SIGTERM, False), (signal.SIGINT, True)],
                         ids=["sigterm", "ctrl-c"])
def test_a_stop_reaches_every_job_of_a_joblib_sweep(tmp_path, signum, group):
    """Two workers, four jobs: the two running stop after a checkpoint, the two queued never
    start, and the launching process exits once its workers are done."""
    sweep, log = _start(tmp_path, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *LONG,
                        "seed=0,1,2,3")
    _wait_running(sweep, log, 2)
    processes = _stop(sweep, log, signum, group)
    _check_stopped(tmp_path, log, 128 + signum, sweep.returncode, _outlived(processes),
                   {"0", "1", "2", "3"})
    assert "2 job processes asked" in log.read_text()


@pytest.mark.slow
def test_a_stop_leaves_a_worker_idle_after_a_job_alive_until_the_others_stopped(tmp_path):
    """A worker whose job finished waits for the sweep's end with threads its job started
    (torch's, MLflow's): a SIGTERM they take must not end it (the default would), or loky
    kills the other workers, the one still checkpointing too."""
    signum, group = signal.SIGTERM, False
    sweep, log = _start(tmp_path, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *LONG,
                        "steps=1000000,200", "eval.final=0")  # the second finishes at once
    deadline = time.monotonic() + 120
    while "dqn-cartpole-host-fp32-s0 finished" not in log.read_text():
        assert time.monotonic() < deadline and sweep.poll() is None, log.read_text()[-3000:]
        time.sleep(0.3)
    _wait_running(sweep, log, 1)
    time.sleep(1)
    processes = _stop(sweep, log, signum, group)
    text = log.read_text()
    assert sweep.returncode == 128 + signum, text[-3000:]
    assert not _outlived(processes)
    runs = mlflow_runs(tmp_path)
    statuses = sorted((r.data.params.get("steps"), r.info.status) for r in runs
                      if "mlflow.parentRunId" in r.data.tags)
    assert statuses == [("1000000", "KILLED"), ("200", "FINISHED")], text[-3000:]
    assert len(list(tmp_path.glob("runs/multirun/*/*/*/checkpoint.pt"))) == 2


@pytest.mark.slow
def test_a_stop_ends_a_joblib_sweep_whose_one_worker_is_the_launching_process(tmp_path):
    """joblib runs the jobs of n_jobs=1 in the launching process: the stop reaches the job
    there and ends the sweep, as under the basic launcher."""
    sweep, log = _start(tmp_path, "hydra/launcher=joblib", "hydra.launcher.n_jobs=1", *LONG,
                        "seed=0,1")
    _wait_running(sweep, log, 1)
    _stop(sweep, log, signal.SIGTERM, group=False)
    text = log.read_text()
    assert sweep.returncode == 143, text[-3000:]
    assert "go on with: python -m hetrl resume=" in text.splitlines()[-1], text[-3000:]
    runs = mlflow_runs(tmp_path)
    (parent,) = [r for r in runs if r.data.tags.get("sweep") == "true"]
    assert [r.info.status for r in runs if r is not parent] == ["KILLED"]
    assert parent.info.status == "KILLED"
    assert [(r["seed"], r["status"]) for r in _summary(tmp_path, parent)] == [
        ("0", "KILLED"), ("1", "NOT_STARTED")]
    assert len(list(tmp_path.glob("runs/multirun/*/*/0/checkpoint.pt"))) == 1


@pytest.mark.slow
@pytest.mark.parametrize("signum,group", [(signal.SIGTERM, False), (signal.SIGINT, True)],
                         ids=["sigterm", "ctrl-c"])
def test_a_stop_reaches_every_job_of_a_submitit_local_sweep(tmp_path, signum, group):
    """submitit's local controller SIGKILLs its tasks a second after a Ctrl-C of its own:
    it never sees one, and its tasks get the launching process's SIGTERM."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    sweep, log = _start(tmp_path, "hydra/launcher=submitit_local", *LONG, "seed=0,1")
    _wait_running(sweep, log, 2)
    processes = _stop(sweep, log, signum, group)
    _check_stopped(tmp_path, log, 128 + signum, sweep.returncode, _outlived(processes),
                   {"0", "1"})


WORKERS_MASK = """
import signal, sys
from joblib import Parallel, delayed
from omegaconf import OmegaConf
from hetrl.sweep.stops import SweepStops

def blocked():
    return sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))

stops = SweepStops()
stops.on_multirun_start(OmegaConf.create({"hydra": {"sweep": {"dir": sys.argv[1]}, "launcher": {
    "_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"}}}))
try:
    print(Parallel(n_jobs=2)(delayed(blocked)() for _ in range(2)))
finally:
    stops.release()
"""


def test_a_joblib_sweeps_workers_start_with_its_stops_blocked(tmp_path):
    """loky's workers inherit the blocked mask: the resource tracker that the first pool of a
    process starts once unblocked it (a stop as they started killed them, and the sweep ended
    with loky's TerminatedWorkerError). A fresh process: one whose tracker runs proves
    nothing."""
    out = subprocess.run([sys.executable, "-c", WORKERS_MASK, str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    both = [int(signal.SIGINT), int(signal.SIGTERM)]
    assert out.stdout.split("\n")[-2] == str([both, both]), out.stdout + out.stderr[-2000:]


def test_a_stop_sent_to_a_worker_between_two_jobs_stops_the_next_before_its_run(tmp_path):
    """A sweep's worker inherits SIGINT and SIGTERM blocked: one sent between two jobs waits,
    and the next job stops as it begins, leaving no run and its signals blocked again."""
    main = threading.main_thread().ident
    handler = signal.signal(signal.SIGTERM, lambda *_: None)  # were it to get through
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        signal.pthread_kill(main, signal.SIGTERM)  # pending
        with pytest.raises(Stopped) as stopped:
            run_job(tmp_path, "algo=dqn", "steps=300", "algo.learning_starts=100")
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGTERM, handler)
    assert stopped.value.signum == signal.SIGTERM and stopped.value.step is None
    assert signal.SIGTERM in blocked
    assert not (tmp_path / "mlflow.db").exists() or mlflow_runs(tmp_path) == []


def test_jobs_not_started_are_found_by_their_overrides_whatever_order_jobs_ran_in():
    jobs = [["algo=dqn", f"seed={s}", "tracking.uri=sqlite\\:///x.db"] for s in range(4)]

    def child(seed: int):
        command = f"python -m hetrl algo=dqn seed={seed} 'tracking.uri=sqlite\\:///x.db'"
        return SimpleNamespace(data=SimpleNamespace(tags={"command": command}))

    assert _not_started(jobs, [child(3), child(1)]) == [(0, jobs[0]), (2, jobs[2])]
    assert _not_started(jobs, []) == list(enumerate(jobs))


def test_a_slurm_sweep_is_configured_from_yaml_and_a_stop_asks_its_jobs_by_scancel(
        tmp_path, monkeypatch):
    """hydra/launcher=slurm composes submitit's SLURM launcher from conf/; on a stop, every
    job submitit filed (`<id>_submitted.pkl` in its `%j` folder) gets scancel --signal=TERM.
    No SLURM here: scancel is a script that records how it was called."""
    from hydra import compose, initialize_config_dir

    from hetrl.paths import CONF_DIR
    from hetrl.sweep.stops import SLURM_LAUNCHER, cancel_slurm_jobs

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", ["hydra/launcher=slurm", "hydra.launcher.partition=gpu"],
                      return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_ == SLURM_LAUNCHER  # the branch SweepStops takes
    assert (launcher.partition, launcher.cpus_per_task, launcher.max_num_timeout) == ("gpu", 2, 0)
    folder = OmegaConf.to_container(launcher)["submitit_folder"]
    assert folder == "${hydra.sweep.dir}/.submitit/%j"
    folder = folder.replace("${hydra.sweep.dir}", str(tmp_path / "sweep"))

    bin_dir, called = tmp_path / "bin", tmp_path / "scancel.args"
    bin_dir.mkdir()
    (bin_dir / "scancel").write_text(f'#!/bin/sh\necho "$@" >> {called}\n')
    (bin_dir / "scancel").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert cancel_slurm_jobs(folder) == 0 and not called.exists()  # nothing submitted yet
    for job_id in ("4242_0", "4242_1"):
        job_dir = Path(folder.replace("%j", job_id))
        job_dir.mkdir(parents=True)
        (job_dir / f"{job_id}_submitted.pkl").write_bytes(b"")
    assert cancel_slurm_jobs(folder) == 2
    assert called.read_text().split() == ["--signal=TERM", "4242_0", "4242_1"]
