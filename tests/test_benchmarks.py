"""Every benchmark in `benchmarks/` runs its `--smoke` mode to the end and prints its table.

A benchmark is any script there with a `__main__` guard, so a new one is covered as soon as
it lands (helper modules such as `common.py` have none). A smoke run is forked from a process
that made the imports the benchmarks share, once per test process (tests/forks.py)."""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import sqlite3
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

import pytest
from forks import Forked
from helpers import mlflow_runs

BENCHMARKS = sorted(path for path in (Path(__file__).parent.parent / "benchmarks").glob("*.py")
                    if 'if __name__ == "__main__":' in path.read_text())
# what a benchmark needs beyond `.[test]`: SB3 for those that run it as their reference
EXTRAS = {name: "stable_baselines3" for name in ("vs_sb3.py", "pearl_eps.py", "learning_vs_sb3.py")}
# benchmarks whose smoke a test of their own runs and checks further (below)
OWN_TEST = {"mixed_reward_error.py", "partition_scaling.py"}
SMOKED = [path for path in BENCHMARKS if path.name not in OWN_TEST]
TABLE = re.compile(r"^\|(---:?\|)+$", re.MULTILINE)
COMMITTED = BENCHMARKS[0].parent / "results"


@pytest.mark.slow
@pytest.mark.parametrize("script", SMOKED, ids=[path.stem for path in SMOKED])
def test_smoke(script: Path, tmp_path: Path) -> None:
    """A benchmark with several modes smokes them all in its one `--smoke` run, which writes
    nothing into the committed benchmarks/results/ (the tests run them)."""
    if script.name in EXTRAS:
        pytest.importorskip(EXTRAS[script.name], reason="pip install -e '.[bench]'")
    before = _sizes(COMMITTED)
    out = _smoke(script, tmp_path)
    assert _sizes(COMMITTED) == before
    assert TABLE.search(out) and "results appended" not in out, out[-3000:]


def _sizes(folder: Path) -> dict[Path, int]:
    return {path: path.stat().st_size for path in folder.iterdir()}


def _smoke(script: Path, cwd: Path, *args: str) -> str:
    """What `python benchmarks/<script> --smoke <args>` printed, run in `cwd` (forked); it must
    succeed."""
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        code = _started(script, cwd, out, err, 300, *args).wait()
        assert code == 0, f"exit {code} (-9: past 300 s)\n{err.read_text()[-3000:]}"
        return out.read_text()


def _started(script: Path, cwd: Path, out: Path, err: Path, timeout: float,
             *args: str) -> Forked:
    """`python benchmarks/<script> --smoke <args>` forked in `cwd`, its stdout and stderr going
    to `out` and `err`, killed after `timeout` seconds."""
    return Forked([str(script), "--smoke", *args], cwd,
                  {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}, out, err, timeout)


def test_the_committed_results_read_back_with_their_commit_date_and_host() -> None:
    """Every line of benchmarks/results/*.jsonl is a JSON record with the commit, date and
    host line it was measured on; a benchmark's own file holds its tables' rows as dicts (the
    ledger of mixed_reward_error's jobs, reward_error.jsonl, holds a job's scores instead)."""
    files = sorted(COMMITTED.glob("*.jsonl"))
    assert files
    for path in files:
        for line in path.read_text().splitlines():
            record = json.loads(line)
            assert {"commit", "date", "host"} <= set(record), (path.name, line[:200])
            if path.stem != "reward_error":
                assert record["benchmark"] == path.stem, (path.name, line[:200])
                assert all(isinstance(row, dict) for t in record["tables"] for row in t["rows"])


@pytest.mark.slow
def test_a_benchmark_appends_its_record_to_the_results_it_is_given(
        tmp_path: Path) -> None:
    """Given `--results FILE`, a smoke run appends one record there (and nothing to the
    committed benchmarks/results/, as test_smoke shows of every smoke run without it) that
    reads back with the commit, dirty flag, date, host line, its args and its tables' rows as
    dicts by column. This run is partition_scaling's smoke (a second of ILP solves)."""
    script = next(path for path in BENCHMARKS if path.name == "partition_scaling.py")
    before = _sizes(COMMITTED)
    out = _smoke(script, tmp_path, "--results", "out/scaling.jsonl")
    assert _sizes(COMMITTED) == before
    assert TABLE.search(out) and "results appended to out/scaling.jsonl" in out, out[-3000:]
    [line] = (tmp_path / "out" / "scaling.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert record["benchmark"] == "partition_scaling" and len(record["commit"]) == 7
    assert isinstance(record["dirty"], bool) and record["date"][:2] == "20"
    assert record["host"].startswith("host: ") and record["args"] == {
        "sizes": [15, 30, 60, 100, 200, 500], "time_limit": 10.0, "tightness": 0.4,
        "disjunctive": False, "seed": 0, "smoke": True}  # as parsed, --results aside
    rows = record["tables"][0]["rows"]
    assert [row["nodes"] for row in rows] == [15, 30], record["tables"]
    assert set(rows[0]) >= {"edges", "status", "gap"}, record["tables"]


@pytest.mark.slow
def test_a_stored_reward_error_run_reads_its_finished_jobs_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """`mixed_reward_error.py --smoke --store --ledger`: run again with the store, it prints
    the same table without training a job again (a stopped one would resume from its
    checkpoint, as test_reproducibility.py shows of any job); run with the ledger alone, on a
    machine without the store, the same table again. Each run is the benchmark's `main` in the
    test's own process (no process start, with its imports, of its own): the first trains its
    two seeds in two worker processes, the others read them back. With the ledger's fp32 jobs
    alone, in a new store, the mixed jobs train again (in this process, one worker) and no
    fp32 twin beside them."""
    script = next(path for path in BENCHMARKS if path.name == "mixed_reward_error.py")
    monkeypatch.syspath_prepend(str(script.parent))
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.chdir(tmp_path)
    bench = importlib.import_module(script.stem)

    def smoke(*args: str) -> str:
        """What the benchmark prints, run with `--smoke <args>` in this process."""
        monkeypatch.setattr(sys, "argv", [str(script), "--smoke", *args])
        capsys.readouterr()
        bench.main()
        return capsys.readouterr().out

    def checkpoints() -> dict[Path, int]:
        return {path: path.stat().st_mtime_ns
                for path in (tmp_path / "store").glob("*/seed*/*/checkpoint.pt")}

    outputs = [smoke("--store", "store", "--workers", "2", "--ledger", "ledger.jsonl")]
    stored = [checkpoints()]
    for args in (["--store", "store"], ["--ledger", "ledger.jsonl"]):
        outputs.append(smoke(*args))
        stored.append(checkpoints())
    assert len(stored[0]) == 4  # 2 seeds x (fp32, mixed)
    assert stored[2] == stored[1] == stored[0]
    ledger = (tmp_path / "ledger.jsonl").read_text().splitlines()
    assert len(ledger) == 4  # a line a job
    assert outputs[2].count("from the ledger") == 4 and "from the ledger" not in outputs[0]
    tables = [TABLE.search(out) and out[out.index("\n|"):] for out in outputs]
    assert tables[0] and tables[2] == tables[1] == tables[0], outputs[0][-3000:]
    rows = [line for line in tables[0].splitlines() if line.startswith("| dqn_cartpole")]
    assert len(rows) == 2  # the scored return and the other
    for row in rows:  # the signed change of the means: the error, with mixed's side as its sign
        fp32, mixed, signed, error = (row.split("|")[i].strip() for i in (5, 6, 7, 10))
        assert abs(float(signed)) == float(error.split("**")[1]), row
        assert float(signed) * (float(mixed) - float(fp32)) >= 0, row

    (tmp_path / "fp32.jsonl").write_text("".join(
        f"{line}\n" for line in ledger if '"precision": "fp32"' in line))
    again = smoke("--store", "again", "--ledger", "fp32.jsonl")
    for seed in (0, 1):
        runs = mlflow_runs(tmp_path / "again" / "dqn_cartpole-300steps" / f"seed{seed}")
        assert [r.data.tags["precision"] for r in runs] == ["mixed"]
    assert again[again.index("\n|"):] == tables[0]  # the same numbers: seeded jobs


@pytest.mark.slow
def test_the_workloads_of_a_reward_error_run_share_one_queue(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With 2 workers, the second workload's fp32 job trains beside the first workload's, not
    after its mixed one: no worker waits while a workload has a job it could train. (The
    order is the queue's, whatever a job's size: each trains 100 env steps, 8 updates from
    step 64, and evaluates once.)"""
    script = next(path for path in BENCHMARKS if path.name == "mixed_reward_error.py")
    monkeypatch.syspath_prepend(str(script.parent))  # as the workers import it
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    bench = importlib.import_module(script.stem)
    job = ["algo=dqn", "env=cartpole", "steps=100", "algo.learning_starts=64",
           "algo.train_freq=32", "algo.gradient_steps=4", "eval.every=100", "eval.episodes=1",
           "eval.final=0", "platform.measure_layers=false", "compile=false"]
    found = bench.scored_jobs(tmp_path, {"a": (job, 100), "b": (job, 100)}, range(1), 2, None)
    assert sorted(found) == [(name, 0, label) for name in "ab" for label in ("fp32", "mixed")]
    assert found["a", 0, "fp32"] == found["b", 0, "fp32"]  # one seeded job, twice
    started = {(name, run.data.tags["precision"]): run.info.start_time
               for name in "ab" for run in mlflow_runs(tmp_path / f"{name}-100steps" / "seed0")}
    assert started["b", "fp32"] < started["a", "mixed"], started


@pytest.mark.slow
def test_a_stop_reaches_every_worker_of_a_reward_error_run(tmp_path: Path) -> None:
    """SIGTERM to `mixed_reward_error.py --workers 2` goes on to both running jobs: each
    checkpoints and ends KILLED before the benchmark exits 143 with the command that goes on,
    and no other job starts. (The jobs are the smoke's, long enough to be stopped: they
    reach their loop with no layers measured and no update compiled.)"""
    script = next(path for path in BENCHMARKS if path.name == "mixed_reward_error.py")
    err = tmp_path / "stderr"
    run = _started(script, tmp_path, Path(os.devnull), err, 480, "--steps", "50000",
                   "--workers", "2", "--store", "store")
    seeds = [tmp_path / "store" / "dqn_cartpole-50000steps" / f"seed{seed}" for seed in (0, 1)]
    deadline = time.monotonic() + 240
    try:
        while not all(_opened_runs(seed) for seed in seeds):
            assert run.poll() is None and time.monotonic() < deadline, err.read_text()[-3000:]
            time.sleep(0.2)  # until both jobs have opened their runs (and listen for a stop)
        run.send_signal(signal.SIGTERM)
    except BaseException:
        run.kill()
        raise
    finally:
        code = run.wait()  # once it ended
        left = _outliving(tmp_path, 60)
        for stray in left:
            os.kill(stray, signal.SIGKILL)
    out = err.read_text()
    assert code == 143, (code, out[-3000:])
    assert not left, "worker processes outlived the benchmark"
    assert "after a checkpoint; go on with: python" in out.splitlines()[-1], out[-3000:]
    for seed in seeds:
        assert [r.info.status for r in mlflow_runs(seed)] == ["KILLED"]
        assert (seed / "fp32" / "checkpoint.pt").is_file() and not (seed / "mixed").exists()
    assert sorted(path.name for path in seeds[0].parent.iterdir()) == ["seed0", "seed1"]


def _opened_runs(store: Path) -> int:
    """The runs in a store's MLflow database, read as it is being made (MLflow's client
    would migrate it meanwhile)."""
    try:
        with closing(sqlite3.connect(f"file:{store / 'mlflow.db'}?mode=ro", uri=True)) as db:
            return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    except sqlite3.OperationalError:  # no database yet, or no table yet
        return 0


def _outliving(folder: Path, timeout: float) -> list[int]:
    """The processes working in `folder` still there `timeout` seconds on. Those of a
    benchmark end with it, some a moment after it: the fork server its workers come from and
    the resource tracker end as they see their pipes from the benchmark close."""
    deadline = time.monotonic() + timeout
    while (left := _processes_in(folder)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _processes_in(folder: Path) -> list[int]:
    """The processes working in `folder` (their cwd): a benchmark's and its workers'."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if Path(os.readlink(proc / "cwd")) == folder:
                pids.append(int(proc.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return pids
