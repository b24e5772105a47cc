"""Signals at random moments: SIGINT and SIGTERM, single, doubled within 0-20 ms, and
forwarded as a launcher forwards them, sent to `python -m hetrl -m ...` across sweep start,
store creation, a running job (its loop, or its waits on actors and self-play workers) and
between jobs, under the basic, joblib and submitit launchers.

After each trial: exit 130 or 143 (0 if the sweep finished first), no run left RUNNING, the
store opens and takes a new run, no process of the sweep left behind, and (--resume: for that
fraction of the trials) a
stopped job's `resume=` goes on to FINISHED. Any other outcome fails the benchmark (exit 1).

    python benchmarks/signal_trials.py --trials 300 --seed 0   # the table of the closing note
    python benchmarks/signal_trials.py --smoke                 # the CI-sized sample (2 trials)
    python benchmarks/signal_trials.py --trials 3 --cell submitit:actorq:between_jobs:forwarded

The table (launcher x moment x pattern: trials, outcomes) is printed and appended to
benchmarks/results/signal_trials.jsonl with the commit, date and host (not a --smoke run's),
also after a Ctrl-C, of the trials done by then.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import psutil
from common import ROOT, load_average, parse_args, table, write_results

LAUNCHERS = {"basic": [], "joblib": ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
             "submitit": ["hydra/launcher=submitit_local"]}
BASE = ["steps=600,1000000", "log_every=200", "checkpoint_every=400",
        "platform.measure_layers=false", "tracking.system_metrics_s=0"]
DQN = ["algo=dqn", "algo.hidden=[16]", "algo.learning_starts=100"]
KINDS = {"dqn": DQN, "pearl": [*DQN, "scheduler=pearl", "actors.n=1"],
         "actorq": [*DQN, "scheduler=actorq", "actors.n=1"],
         "selfplay": ["algo=alphazero", "algo.width=8", "algo.blocks=1", "selfplay.workers=1",
                      "algo.search.readouts=4", "selfplay.games_per_generation=8",
                      "selfplay.eval_games=2", "selfplay.train_steps=2"]}
# self-play's worker processes (multiprocessing's spawn) cannot start inside a loky worker:
# the child is told to use the parent's start method, "loky", which it does not know
UNSUPPORTED = {("joblib", "selfplay")}
MOMENTS = ("sweep_start", "store_creation", "running", "between_jobs")
PATTERNS = ("SIGINT", "SIGTERM", "SIGINT x2", "SIGTERM x2", "forwarded")
EXIT_S = 120  # a sweep not gone this long after the signal hangs
SMOKE = [("basic", "dqn", "running", "SIGINT x2"),  # and its resume= goes on
         ("basic", "dqn", "store_creation", "forwarded")]
"""--smoke: two trials, a moment read in the sweep's log and one on its store, a doubled signal
and a forwarded one, a stopped job resumed; on the basic launcher, as the others only run the
same jobs in more processes (tests/test_sweep_stops.py stops joblib's and submitit's)."""


@dataclass
class Trial:
    launcher: str
    kind: str
    moment: str
    pattern: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.launcher, f"{self.moment} ({self.kind})", self.pattern)


def start(trial: Trial, folder: Path) -> tuple[subprocess.Popen, Path]:
    """The sweep, in a session of its own (a Ctrl-C reaches its group only)."""
    log = folder / "out.log"
    with open(log, "w") as out:
        sweep = subprocess.Popen(
            [sys.executable, "-m", "hetrl", "-m", f"tracking.uri=sqlite:///{folder}/mlflow.db",
             *LAUNCHERS[trial.launcher], *KINDS[trial.kind], *BASE],
            cwd=folder, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "HYDRA_FULL_ERROR": "0", "PYTHONPATH": str(ROOT)})
    return sweep, log


def wait_for_moment(trial: Trial, sweep: subprocess.Popen, log: Path, rng: random.Random) -> None:
    """Until the trial's moment comes (then a random part of it), or the sweep ended."""
    def until(ready, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while not ready() and sweep.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)

    text = log.read_text
    if trial.moment == "sweep_start":
        time.sleep(rng.uniform(0.3, 4.0))
    elif trial.moment == "store_creation":
        until(lambda: (log.parent / "mlflow.db").exists())
        time.sleep(rng.uniform(0.0, 0.15))
    elif trial.moment == "running":
        until(lambda: " step " in text())
        time.sleep(rng.uniform(0.0, 1.5))
    else:  # between_jobs: job 0 (600 steps) has finished, job 1 begins
        until(lambda: "finished:" in text())
        time.sleep(rng.uniform(0.0, 0.5))


def send(pattern: str, sweep: subprocess.Popen, rng: random.Random) -> None:
    """Ctrl-C reaches the whole group; SIGTERM the launching process (a batch system's);
    doubled: again 0-20 ms later; forwarded: Ctrl-C, then SIGTERM to every process of the
    group, as submitit's controller forwards it to its tasks."""
    name, _, twice = pattern.partition(" ")
    def once(signum: int) -> None:
        try:
            if signum == signal.SIGINT:
                os.killpg(sweep.pid, signum)
            else:
                os.kill(sweep.pid, signum)
        except ProcessLookupError:
            pass

    if pattern == "forwarded":
        once(signal.SIGINT)
        time.sleep(rng.uniform(0.0, 0.02))
        for process in _group(sweep.pid):
            try:
                process.send_signal(signal.SIGTERM)
            except psutil.Error:
                pass
        return
    signum = signal.Signals[name]
    once(signum)
    if twice:
        time.sleep(rng.uniform(0.0, 0.02))
        once(signum)


def _group(sid: int) -> list[psutil.Process]:
    """The processes of the sweep's session (the sweep and everything it started)."""
    found = []
    for process in psutil.process_iter(["pid"]):
        try:
            if os.getsid(process.pid) == sid and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (psutil.Error, OSError):
            continue
    return found


def check(sweep: subprocess.Popen, log: Path, resume: bool) -> str:
    """The trial's outcome: ok (stopped | finished | before the store) or what went wrong."""
    try:
        code = sweep.wait(timeout=EXIT_S)
    except subprocess.TimeoutExpired:
        _kill_group(sweep.pid)
        return "HANG"
    left = _left_behind(sweep.pid)
    store = log.parent / "mlflow.db"
    statuses = _statuses(store) if store.exists() else []
    if statuses is None:
        return "STORE UNUSABLE"
    if "RUNNING" in statuses:
        return "RUN LEFT RUNNING"
    if left:
        return f"{left} PROCESSES LEFT"
    if code not in (0, 130, 143):
        return f"EXIT {code}"
    if "Traceback" in log.read_text():
        return "TRACEBACK"
    if resume and code and not _resumes(log.parent):
        return "RESUME FAILED"
    return ("ok finished" if code == 0 else "ok stopped" if statuses else
            "ok stopped before the store")


def _left_behind(sid: int, timeout: float = 15) -> int:
    deadline = time.monotonic() + timeout
    while (left := _group(sid)) and time.monotonic() < deadline:
        time.sleep(0.3)
    for process in left:
        process.kill()
    return len(left)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _left_behind(pgid, timeout=5)


def _statuses(store: Path) -> list[str] | None:
    """Every run's status; a new run opens and closes there; None: the store is unusable."""
    from mlflow.tracking import MlflowClient

    try:
        client = MlflowClient(f"sqlite:///{store}")
        runs = client.search_runs(["0", *(e.experiment_id for e in client.search_experiments())])
        probe = client.create_run("0")
        client.set_terminated(probe.info.run_id)
        client.delete_run(probe.info.run_id)
    except Exception as error:  # noqa: BLE001 - any failure is the outcome
        print(f"  store unusable: {error}", file=sys.stderr)
        return None
    return [run.info.status for run in runs]


def _resumes(folder: Path) -> bool:
    """A stopped job's resume= goes on to the end of a slightly longer budget."""
    checkpoints = sorted(folder.glob("multirun/*/*/*/checkpoint.pt"))
    if not checkpoints:
        return True  # stopped before any checkpoint: nothing to resume
    from hetrl import checkpoint

    job = checkpoints[-1].parent
    steps = checkpoint.load(job)["loop"].step + 200
    done = subprocess.run(
        [sys.executable, "-m", "hetrl", f"resume={job}", f"steps={steps}",
         f"tracking.uri=sqlite:///{folder}/mlflow.db"], cwd=folder, capture_output=True,
        text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode:
        print(f"  resume={job} steps={steps}: {done.stderr[-2000:]}", file=sys.stderr)
    return done.returncode == 0


def run_trial(trial: Trial, rng: random.Random, resume: bool) -> str:
    with tempfile.TemporaryDirectory(prefix="hetrl-signal-") as tmp:
        folder = Path(tmp)
        sweep, log = start(trial, folder)
        try:
            wait_for_moment(trial, sweep, log, rng)
            if sweep.poll() is None:
                send(trial.pattern, sweep, rng)
                outcome = check(sweep, log, resume)
            else:
                code = sweep.returncode
                outcome = "ok finished" if code == 0 else f"EXIT {code} early"
        finally:
            _kill_group(sweep.pid)
        if not outcome.startswith("ok"):
            print(f"  {trial}: {outcome}\n{log.read_text()[-2000:]}", file=sys.stderr)
        return outcome


def sample(rng: random.Random, n: int) -> list[Trial]:
    """`n` trials drawn across launchers, kinds, moments and patterns (the submitit launcher
    where its plugin is installed)."""
    import importlib.util

    launchers = [name for name in LAUNCHERS if name != "submitit"
                 or importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher")]
    trials = []
    while len(trials) < n:
        trial = Trial(rng.choice(launchers), rng.choice(list(KINDS)), rng.choice(MOMENTS),
                      rng.choice(PATTERNS))
        if (trial.launcher, trial.kind) not in UNSUPPORTED:
            trials.append(trial)
    return trials


def report(results: dict[tuple, Counter]) -> None:
    """The table (launcher x moment x pattern: trials, outcomes) and the total line."""
    table(["launcher", "moment (job)", "signals", "trials", "outcomes"],
          [(*key, sum(results[key].values()),
            ", ".join(f"{name} {n}" for name, n in sorted(results[key].items())))
           for key in sorted(results)], align="lllrl")
    total = Counter()
    for outcomes in results.values():
        total.update(outcomes)
    bad = sum(n for name, n in total.items() if not name.startswith("ok"))
    print(f"\n{sum(total.values())} trials: {bad} not ok "
          f"({', '.join(f'{k} {v}' for k, v in sorted(total.items()))})")


def cell(text: str) -> Trial:
    """A trial named on the command line (--cell), checked against the choices."""
    parts = text.split(":")
    choices = (list(LAUNCHERS), list(KINDS), list(MOMENTS), list(PATTERNS))
    if len(parts) != 4 or any(p not in c for p, c in zip(parts, choices)):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give LAUNCHER:KIND:MOMENT:PATTERN from {' : '.join(map(str, choices))}")
    return Trial(*parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--minutes", type=float, default=None, help="stop drawing after this")
    parser.add_argument("--resume", type=float, default=0.0, metavar="FRACTION",
                        help="resume this fraction of the stopped jobs (1: every one)")
    parser.add_argument("--smoke", action="store_true", help="the CI-sized sample")
    parser.add_argument("--cell", action="append", default=[], type=cell,
                        metavar="LAUNCHER:KIND:MOMENT:PATTERN",
                        help="run this trial (--trials times) instead of a random sample; "
                             "repeatable, e.g. submitit:actorq:between_jobs:forwarded")
    args = parse_args(parser)
    # the sweeps get Ctrl-C's default action, as from a terminal (a shell starts a background
    # job with SIGINT ignored, and an ignored signal stays ignored across exec)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    rng = random.Random(args.seed)
    trials = ([Trial(*spec) for spec in SMOKE] if args.smoke else
              [c for c in args.cell for _ in range(args.trials)] if args.cell else
              sample(rng, args.trials))
    print(f"{len(trials)} signal trials; {load_average()}")
    deadline = None if args.minutes is None else time.monotonic() + 60 * args.minutes
    results: dict[tuple, Counter] = defaultdict(Counter)
    try:
        for k, trial in enumerate(trials):
            if deadline is not None and time.monotonic() > deadline:
                break
            resume = rng.random() < args.resume or (args.smoke and k == 0)
            outcome = run_trial(trial, rng, resume)
            results[trial.key][outcome] += 1
            print(f"{k + 1}. {trial.launcher} {trial.kind} {trial.moment} {trial.pattern}: "
                  f"{outcome}", flush=True)
    except KeyboardInterrupt:  # the trial in flight is dropped (its sweep killed)
        done = sum(sum(outcomes.values()) for outcomes in results.values())
        print(f"Ctrl-C: the {done} trials done are reported and written", flush=True)
    report(results)
    write_results()
    bad = sum(n for outcomes in results.values() for name, n in outcomes.items()
              if not name.startswith("ok"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
