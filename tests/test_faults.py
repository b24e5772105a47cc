"""Faults name the fault: a torn checkpoint, a full disk, an unwritable store and a stop by
signal each end in one line naming the file and what to do, not a traceback."""

from __future__ import annotations

import errno
import signal
import subprocess
import sys
import time

import pytest
import torch
from helpers import hetrl_cli, hetrl_started, mlflow_runs, run_job

from hetrl import checkpoint
from hetrl.faults import Fault, Stopped, StopRequest, exit_on_stop
from hetrl.tracking.mlflow import client_for

QUICK = ("algo=dqn", "env=cartpole", "steps=300", "algo.learning_starts=100", "log_every=100",
         "platform.measure_layers=false")


def _one_line_error(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 1, out.stderr[-3000:]
    assert "Traceback" not in out.stderr and "Error executing job" not in out.stderr, out.stderr
    (line,) = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    return line


def test_a_truncated_checkpoint_is_named_with_what_to_do(tmp_path):
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    path = job_dir / checkpoint.FILENAME
    torch.save({"weights": torch.zeros(10_000)}, path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(Fault, match="truncated or corrupt"):
        checkpoint.load(job_dir)

    line = _one_line_error(hetrl_cli(tmp_path, f"resume={job_dir}", timeout=120))
    assert str(path) in line and "truncated or corrupt" in line and "start the job afresh" in line


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"),
                                   RuntimeError("basic_ios::clear: iostream error")])
def test_a_full_disk_names_the_checkpoint_and_keeps_the_previous_one(tmp_path, monkeypatch,
                                                                     error):
    path = tmp_path / checkpoint.FILENAME
    checkpoint.save(path, {"step": 1})

    def full_disk(state, file):
        open(file, "wb").write(b"torn")  # as a write that ran out of room
        raise error

    monkeypatch.setattr(checkpoint.torch, "save", full_disk)
    with pytest.raises(Fault) as fault:
        checkpoint.save(path, {"step": 2})
    message = str(fault.value)
    assert "\n" not in message and str(path) in message and "the disk is full" in message
    assert f"resume={tmp_path}" in message and "previous checkpoint is kept" in message
    monkeypatch.undo()
    assert checkpoint.load(tmp_path) == {"step": 1}  # the previous checkpoint, whole
    assert not path.with_suffix(".tmp").exists()


KILLED_MID_WRITE = """
import os, signal, sys
from pathlib import Path

import torch

from hetrl import checkpoint


def killed_mid_write(state, file):
    real_save(state, file)
    with open(file, "r+b") as f:  # half of it on disk when the kill lands
        f.truncate(os.path.getsize(file) // 2)
    os.kill(os.getpid(), signal.SIGKILL)


real_save, torch.save = torch.save, killed_mid_write
checkpoint.save(Path(sys.argv[1]), {"step": 2, "weights": torch.ones(10_000)})
"""


def test_a_kill_during_a_checkpoint_write_keeps_the_previous_checkpoint(tmp_path):
    path = tmp_path / checkpoint.FILENAME
    checkpoint.save(path, {"step": 1})
    killed = subprocess.run([sys.executable, "-c", KILLED_MID_WRITE, str(path)],
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert path.with_suffix(".tmp").exists()  # the torn write, beside the checkpoint
    assert checkpoint.load(tmp_path) == {"step": 1}
    checkpoint.save(path, {"step": 3})  # the next checkpoint writes over the torn file
    assert checkpoint.load(tmp_path) == {"step": 3}


def test_a_job_whose_checkpoint_cannot_be_written_fails_naming_it(tmp_path, monkeypatch):
    def full_disk(state, file):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint.torch, "save", full_disk)
    with pytest.raises(Fault, match="checkpoint.pt: the disk is full"):
        run_job(tmp_path, *QUICK)
    assert [r.info.status for r in mlflow_runs(tmp_path)] == ["FAILED"]


def test_an_unwritable_tracking_folder_is_named_at_once(tmp_path):
    in_the_way = tmp_path / "a_file"
    in_the_way.write_text("")
    for uri, folder in ((f"sqlite:///{in_the_way}/mlflow.db", in_the_way),
                        ("sqlite:////sys/fs/mlflow.db", "/sys/fs")):  # read-only, even for root
        with pytest.raises(Fault, match=f"cannot write to {folder} .*tracking.uri=sqlite"):
            client_for(uri, "hetrl")

    start = time.monotonic()
    line = _one_line_error(hetrl_cli(tmp_path, *QUICK, "tracking.uri=sqlite:////sys/fs/mlflow.db",
                                     timeout=120))
    assert "cannot write to /sys/fs" in line
    assert time.monotonic() - start < 60  # not MLflow's ~100 s of retries


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stop_by_signal_exits_with_its_code_and_the_resume_command(tmp_path, signum, code):
    job_dir = tmp_path / "job"
    log = tmp_path / "output.txt"
    # compile=false: compile=auto would compile a 1M-step budget on a machine that never did,
    # and the stop would wait for it
    job = hetrl_started(tmp_path, *QUICK, "steps=1000000", "compile=false",
                        f"hydra.run.dir={job_dir}", log=log)
    try:
        deadline = time.monotonic() + 120
        while "step 200/" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        job.send_signal(signum)
        assert job.wait(timeout=60) == code, log.read_text()[-3000:]
    finally:
        job.kill()
        job.wait()
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]
    assert text.splitlines()[-1].endswith(f"go on with: python -m hetrl resume={job_dir}"), text
    assert (job_dir / checkpoint.FILENAME).is_file()
    assert [r.info.status for r in mlflow_runs(tmp_path)] == ["KILLED"]


@pytest.mark.parametrize("first", [signal.SIGINT, signal.SIGTERM])
def test_later_signals_are_harmless_and_the_first_names_the_stop(first):
    """A Ctrl-C doubled, or forwarded by a sweep's launching process as SIGTERM, only adds to
    the note: nothing is raised from a handler."""
    stop = StopRequest()
    assert not stop.is_set() and not stop.wait(0.05)
    for signum in (first, signal.SIGTERM, signal.SIGINT, signal.SIGINT):
        stop.request(signum, None)
    assert stop.is_set() and stop.signum == first and stop.wait()


STORMED = """
import os, signal, sys, threading, time
from hetrl.faults import StopRequest

stop = StopRequest()
signal.signal(signal.SIGTERM, stop.request)
signal.signal(signal.SIGINT, stop.request)
main = threading.main_thread().ident
start = time.monotonic()
for k in range(2000):  # signals landing on the handler while it runs, as a storm would
    signal.pthread_kill(main, signal.SIGTERM if k % 2 else signal.SIGINT)
    stop.is_set()
print(len(stop.signals), stop.signum, f"{time.monotonic() - start:.1f}")
"""


def test_a_storm_of_signals_neither_deadlocks_nor_raises():
    """The handler of fault 1 deadlocked when a forwarded signal landed while the first held
    the Event's lock: a flag has no lock to hold."""
    out = subprocess.run([sys.executable, "-c", STORMED], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    count, first, _ = out.stdout.split()
    assert int(count) > 0 and int(first) == signal.SIGINT


def test_a_stop_names_the_command_that_goes_on_where_it_is_not_resume(capsys):
    """As a benchmark that resumes its own jobs (mixed_reward_error.py --store) reports it."""
    def stopped_job():
        raise Stopped(signal.SIGTERM, 265747, job_dir="/store/seed0/fp32")

    with pytest.raises(SystemExit) as exit:
        exit_on_stop(stopped_job, go_on="python bench.py --store s")
    assert exit.value.code == 143
    assert capsys.readouterr().err == ("stopped at step 265747 by SIGTERM, after a checkpoint; "
                                       "go on with: python bench.py --store s\n")
