"""AP-DRL's reward errors (Table III), reproduced in kind: each workload that trains on 2 cores,
trained in hardware-aware mixed precision on the modeled Versal plan against the same job in
fp32, over >= 5 seeds, the error taken on deterministic evaluations.

Run from the repository root:

    python benchmarks/mixed_reward_error.py                       # every workload, 5 seeds: hours
    python benchmarks/mixed_reward_error.py --workload dqn_cartpole --seeds 8
    python benchmarks/mixed_reward_error.py --smoke               # 2 seeds, 300 steps: seconds
    python benchmarks/mixed_reward_error.py --workers 2 ...       # two seeds at a time
    python benchmarks/mixed_reward_error.py --workload ddpg_lunarlander_continuous \
        --workers 2 --ledger benchmarks/results/reward_error.jsonl   # across machines
    python benchmarks/mixed_reward_error.py --workload ddpg_mountaincar_continuous \
        --store runs/reward_error     # across sittings: stop it any time, run it again

Each pair is two real `hetrl.experiment.run` jobs composed as `python -m hetrl` would compose
them, tracked to a throwaway MLflow store (or to `--store`, where each job checkpoints every
10k env steps: run the same command again and the finished jobs are read back, the stopped
ones resumed where their checkpoint left them, so the hours of the DDPG rows can be spread
over several sittings): `precision=fp32` first, then `platform=versal
precision=mixed`, which finds that fp32 run by its numerics key. Both evaluate their policy
deterministically (`eval.every`, `eval.episodes`: greedy/mean actions on eval envs with seeds
of their own, the same episodes for both), and the error is taken on an evaluation (which
one, per workload, under Budgets below), not on the training return: `return_mean_100` mixes
in exploration and the last 100 episodes of a policy that is still moving, and was the noise
that made the old figures unresolvable (benchmarks/results/README.md).

A store lives on one machine. `--ledger FILE` also appends each finished job (its scores, the
commit, date and host) to a JSON-lines file, and takes the jobs already in it as done:
committed, it carries a row of many hours to the next sitting on another machine, which
trains only the jobs it lacks (a job stopped halfway starts again there). The workloads'
jobs share one queue, every fp32 job first, so a sitting that ends early has the noise
floor's jobs and no worker waits for another workload's last job; a mixed job whose fp32 twin
is in the ledger and not in its store trains no twin (`reference=find`). The committed ledger
is benchmarks/results/reward_error.jsonl; the table each run prints is appended to
benchmarks/results/mixed_reward_error.jsonl.

The table gives, per workload, the error of the seed means with its 95 % stratified-bootstrap
interval and the fp32 noise floor (the upper end of the interval of fp32 against itself), both
from rliable (`hetrl.tracking.seeds`, `pip install 'hetrl[stats]'`), beside the paper's error.
Goal (issue 15): the error of the means <= 5 % and inside the noise floor. The error is
absolute, as the paper's; the column "mixed vs fp32 (signed)" tells a mixed run that lost
reward (negative) from one that scored higher than fp32 (positive).

The column "reduced forward layers" counts the layers the Versal plan computes in fp16 or
bf16 (`reduced_forward_layers`, from what the precision policy applies). Where it is 0 the
plan keeps every forward pass on the PS in fp32, the mixed job computes the fp32 job's numbers
bit for bit, and its error of 0 says nothing about fp16 or bf16. A2C with one env is such a
plan (its updates of 5 transitions keep the 64x64 networks on the PS); the row runs 16 envs,
AP-DRL's larger batches (spec D.1 #15): updates of 80 transitions, 7 forward layers below fp32.

The column "seeds solved" counts the seeds whose scored return reaches gymnasium's
`reward_threshold` of the env (CartPole 475, InvertedPendulum 950, LunarLander 200,
MountainCar 90). Where a seed either solves the task or never does (MountainCarContinuous: 94
when its exploration finds the flag, -99.9 when it never does, a matter of the seed, not of
the numerics: fp32 seeds split so too), the mean of 5 seeds moves by ~40 with each seed, and
whether mixed precision solves as many seeds as fp32 is the comparison that stands.

Budgets and the return scored, where the fp32 runs have converged and stay converged:
- A2C-InvertedPendulum: 200k steps (rl-zoo3's), where its evaluations have long converged
  with 16 envs (benchmarks/results/README.md); the final evaluation counts.
- DQN-CartPole: no budget stays converged: the fp32 runs reach 500 and fall back, as
  rl-baselines3-zoo#472 reports, with double DQN too and with CleanRL's hyperparameters, under
  which SB3's DQN collapses like hetrl's (the runs: benchmarks/results/README.md). So the row
  scores the policy a user keeps: the learner at its best evaluation (every 10k, 20 episodes), scored at the end
  on 20 episodes no evaluation played (`eval/best_return_mean`, SB3's best model), at 100k.
- The DDPG rows take rl-zoo3's budgets (300k) and the final evaluation; their numerics are as
  real, but on 2 cores a DDPG row is ~1 h per job.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import signal
import statistics
import sys
import tempfile
from multiprocessing import get_context
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import NamedTuple

import gymnasium as gym
import numpy as np
import torch
from common import (append_line, code_state, host_line, job_config, parse_args, run_or_resume,
                    table, verdict, write_results)
from omegaconf import DictConfig

from hetrl.build import build
from hetrl.faults import Stopped, exit_on_stop
from hetrl.precision.mixed import layer_forward_dtypes
from hetrl.stopping import SIGNALS, block
from hetrl.tracking.seeds import REPS, bootstrap, change_of_means, error_of_means

FINAL, KEPT = "eval/return_mean", "eval/best_return_mean"


class Workload(NamedTuple):
    overrides: list[str]
    steps: int
    eval_every: int
    eval_episodes: int
    paper_pct: float  # [P] Table III
    score: str  # the return the error stands on: the final evaluation, or the kept policy's


WORKLOADS = {
    "dqn_cartpole": Workload(["algo=dqn", "env=cartpole"], 100_000, 10_000, 20, 1.60, KEPT),
    "a2c_inverted_pendulum": Workload(["algo=a2c", "env=inverted_pendulum", "env.n_envs=16"],
                                      200_000, 20_000, 20, 4.81, FINAL),
    "ddpg_lunarlander_continuous": Workload(["algo=ddpg", "env=lunarlander_continuous"],
                                            300_000, 30_000, 20, 1.73, FINAL),
    "ddpg_mountaincar_continuous": Workload(["algo=ddpg", "env=mountaincar_continuous"],
                                            300_000, 30_000, 20, 1.12, FINAL),
}
GOAL_PCT = 5.0
CHECKPOINT_EVERY = 10_000  # env steps: what a stopped job of a --store loses at most
MIN_SEEDS = 5
SMOKE_WORKLOAD, SMOKE_SEEDS, SMOKE_STEPS, SMOKE_REPS = "dqn_cartpole", 2, 300, 100
SMOKE_BUDGET = ("algo.learning_starts=100", "algo.gradient_steps=16", "eval.every=150",
                "eval.episodes=2", "eval.final=0", "platform.measure_layers=false",
                "compile=false")
"""--smoke: DQN-CartPole, 2 seeds of 300 env steps learning from step 100 (one round of 16
eager updates, at step 256), evaluated twice on 2 episodes (no final evaluation: the table
scores the evaluations); 100 bootstrap resamples."""


def reduced_forward_layers(cfg: DictConfig) -> int:
    """How many layers the job `cfg` (`platform=versal precision=mixed`) computes in a dtype
    below fp32."""
    c = build(cfg, plan=True)
    nodes = c.precision.node_dtypes(c.step_plan.graph, c.step_plan.plan, c.platform)
    return sum(dtype != torch.float32
               for layers in layer_forward_dtypes(nodes).values() for dtype in layers.values())


LABELS = ("fp32", "mixed")


class Job(NamedTuple):
    """One of a seed's two jobs, kept in the seed's own MLflow store (seeds run at once)."""

    store: Path
    workload: str
    seed: int
    label: str  # "fp32" or "mixed"
    overrides: list[str]  # the seed's job, its precision aside


def train(job: Job) -> dict:
    """The fp32 job, or the mixed one, which compares itself with the fp32 one where that ran
    in the same store (`reference=find`: where the ledger holds it instead, no twin is
    trained; the table takes both jobs' scores as they are)."""
    if job.label == "fp32":
        overrides = [*job.overrides, "precision=fp32"]
    else:
        overrides = [*(o for o in job.overrides if "measure_layers" not in o),
                     "platform=versal", "precision=mixed", "reference=find"]
    return run_or_resume(job.store, job.store / job.label, *overrides,
                         checkpoint_every=CHECKPOINT_EVERY)


def intervals(scores: dict[str, np.ndarray], reps: int) -> dict[str, tuple[float, float]]:
    """The 95 % stratified-bootstrap interval of `error_of_means` of each runs x 2 matrix over
    `reps` resamples (as hetrl.tracking.seeds.intervals, which takes its REPS); none without
    rliable."""
    try:
        cis = bootstrap(scores, error_of_means, reps)
    except ImportError:
        print("rliable is not installed (pip install 'hetrl[stats]'): no intervals",
              file=sys.stderr)
        return {}
    return {name: (float(ci[0, 0]), float(ci[1, 0])) for name, ci in cis.items()}


def job_scores(metrics: dict) -> dict[str, float]:
    return {key: metrics.get(key, float("nan")) for key in (FINAL, KEPT)}


class Ledger:
    """The finished jobs, a JSON line each (`--ledger`): the workload, the seed's job
    overrides, fp32 or mixed, its scores, and the commit, date and host it was measured on. A
    store lives on one machine; the ledger, committed, carries a row of many hours across
    sittings: a job found in it is not trained again (its overrides must match exactly)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries = ([json.loads(line) for line in path.read_text().splitlines() if line]
                        if path.is_file() else [])
        # the code the jobs run: this checkout as the benchmark starts, not as a job ends
        # (the ledger's own new lines do not make it dirty)
        self.code = code_state(ignore=path)

    def find(self, workload: str, job: list[str], label: str) -> dict | None:
        return next((e for e in self.entries
                     if (e["workload"], e["job"], e["precision"]) == (workload, job, label)),
                    None)

    def add(self, workload: str, job: list[str], label: str, metrics: dict) -> dict:
        entry = {"workload": workload, "job": job, "precision": label,
                 "scores": job_scores(metrics), **self.code,
                 "date": datetime.date.today().isoformat(), "host": host_line()}
        append_line(self.path, entry)
        self.entries.append(entry)
        return entry


def _work(conn: Connection) -> None:
    """A worker process: trains each job it is sent, one after another, and sends back its
    final metrics or the exception it raised (a stopped job's `Stopped` included), until it is
    sent None. Between jobs SIGINT and SIGTERM wait, blocked (a job unblocks them as it
    starts, hetrl.experiment): one that came meanwhile is dropped as the worker ends."""
    block(SIGNALS)
    while (job := conn.recv()) is not None:
        try:
            conn.send(train(job))
        except BaseException as error:  # noqa: BLE001  (the parent raises it)
            conn.send(error)


WORKER_IMPORTS = ["__main__", "hetrl.experiment", "torch._dynamo"]
"""What a worker imports before its first job trains (a job's first optimizer imports
torch._dynamo): multiprocessing's fork server imports it once and forks each worker from it,
where a spawned worker imported it all again (~7 CPU-s a worker on 2 cores)."""


def worker_context() -> BaseContext:
    """Workers forked from a fork server that imported WORKER_IMPORTS (a fork of this process,
    whose threads may hold locks, would not be safe)."""
    context = get_context("forkserver")
    context.set_forkserver_preload(WORKER_IMPORTS)
    return context


class Worker:
    """A worker process (started at once), the parent's end of its pipe and the job it trains
    (None while idle)."""

    def __init__(self, context: BaseContext) -> None:
        self.conn, there = context.Pipe()
        self.process = context.Process(target=_work, args=(there,))
        self.process.start()
        there.close()
        self.job: Job | None = None


def _running(pool: list[Worker]) -> list[Worker]:
    return [worker for worker in pool if worker.job is not None]


def finished_jobs(jobs: list[Job], workers: int):
    """(job, final metrics) of each job as it finishes: in order in this process with one
    worker, else `workers` at a time in as many processes, each of which trains job after job
    (a job pays no process start, with its imports), in order but never two of one store at
    once (a seed's mixed job waits for its fp32 one). A Ctrl-C or SIGTERM here goes on to the
    running jobs as SIGTERM (each checkpoints and ends KILLED; for a job the Ctrl-C reached
    too it is not a second one), no job starts after it, and a stopped job's `Stopped` is
    raised once every running job has stopped."""
    if workers == 1:
        for job in jobs:
            yield job, train(job)
        return
    context = worker_context()
    waiting = list(jobs)
    pool: list[Worker] = []
    stops: list[int] = []

    def stop(signum: int, frame: object) -> None:
        stops.append(signum)
        for worker in _running(pool):
            worker.process.terminate()

    handlers = {s: signal.signal(s, stop) for s in SIGNALS}
    stopped = None
    try:
        while _running(pool) or (waiting and not stops):
            while not stops:
                busy = {w.job.store for w in _running(pool)}
                job = next((job for job in waiting if job.store not in busy), None)
                idle = [w for w in pool if w.job is None]
                if job is None or not idle and len(pool) == workers:
                    break
                if idle:
                    worker = idle[0]
                else:
                    worker = Worker(context)
                    pool.append(worker)
                waiting.remove(job)
                worker.job = job
                worker.conn.send(job)
                if stops:  # the stop came as it started
                    worker.process.terminate()
            running = _running(pool)
            ready = set(wait([end for w in running for end in (w.conn, w.process.sentinel)]))
            for worker in [w for w in running if ready & {w.conn, w.process.sentinel}]:
                job, worker.job = worker.job, None
                try:
                    outcome = worker.conn.recv()
                except EOFError:  # it died without a word
                    pool.remove(worker)
                    worker.process.join()
                    outcome = None if stops else RuntimeError(
                        f"the worker of seed {job.seed}'s {job.label} job exited "
                        f"(code {worker.process.exitcode})")
                if isinstance(outcome, Stopped) or outcome is None:
                    stopped = stopped or outcome
                elif isinstance(outcome, BaseException):
                    raise outcome
                else:
                    yield job, outcome
        if stops:
            raise stopped or Stopped(stops[0])
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        for worker in pool:
            if worker.job is not None:  # a failure elsewhere: it stops, checkpointed
                worker.process.terminate()
            try:
                worker.conn.send(None)
            except OSError:  # it is gone
                pass
        for worker in pool:
            worker.process.join()


def scored_jobs(store: Path, jobs: dict[str, tuple[list[str], int]], seeds: range,
                workers: int, ledger: Ledger | None) -> dict[tuple[str, int, str], dict]:
    """The scores of every workload's every seed's fp32 and mixed job, by (workload, seed,
    label): each read from the ledger where it holds it, trained (and entered in the ledger as
    it finishes) where not. The workloads' jobs share one queue, every fp32 job first, so a
    worker that one workload's last job leaves free takes the next workload's first."""
    found: dict[tuple[str, int, str], dict] = {}
    todo = []
    for label in LABELS:
        for name, (job, steps) in jobs.items():
            for seed in seeds:
                overrides = [*job, f"seed={seed}"]
                entry = ledger.find(name, overrides, label) if ledger else None
                if entry is None:
                    todo.append(Job(store / f"{name}-{steps}steps" / f"seed{seed}", name, seed,
                                    label, overrides))
                else:
                    print(f"{name} seed {seed} {label}: from the ledger "
                          f"({entry['commit']}, {entry['date']})")
                    found[name, seed, label] = entry["scores"]
    for done, metrics in finished_jobs(todo, workers):
        found[done.workload, done.seed, done.label] = (
            ledger.add(done.workload, done.overrides, done.label, metrics)["scores"] if ledger
            else job_scores(metrics))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), action="append",
                        help="a Table III workload (repeatable; default: all four)")
    parser.add_argument("--seeds", type=int, default=MIN_SEEDS)
    parser.add_argument("--steps", type=int,
                        help="override every workload's budget (--smoke's too)")
    parser.add_argument("--workers", type=int, default=1,
                        help="seeds trained at a time, one process each (2 on 2 cores)")
    parser.add_argument("--smoke", action="store_true", help="DQN-CartPole, 2 seeds, 300 steps")
    parser.add_argument("--ledger", type=Path,
                        help="a JSON-lines file of finished jobs: those in it are read, not "
                             "trained; each new one is appended (commit it to go on elsewhere)")
    parser.add_argument("--store", type=Path,
                        help="keep the jobs here (MLflow store, checkpoints): run again with it "
                             "to read back the finished jobs and resume the stopped ones")
    args = parse_args(parser)
    if args.workers < 1:
        parser.error(f"--workers {args.workers}: give 1 or more (seeds trained at a time)")
    if not args.smoke and args.seeds < MIN_SEEDS:
        parser.error(f"--seeds {args.seeds}: a reward error of 1-5 % needs >= {MIN_SEEDS} seeds")
    names = [SMOKE_WORKLOAD] if args.smoke else args.workload or list(WORKLOADS)
    seeds = range(SMOKE_SEEDS if args.smoke else args.seeds)
    ledger = Ledger(args.ledger) if args.ledger else None
    jobs = {}
    for name in names:
        overrides, steps, every, episodes, _, _ = WORKLOADS[name]
        steps = args.steps or (SMOKE_STEPS if args.smoke else steps)
        if args.smoke:
            budget = [f"steps={steps}", *SMOKE_BUDGET]
        else:
            budget = [f"steps={steps}", f"eval.every={every}", f"eval.episodes={episodes}",
                      "log_every=5000"]
        jobs[name] = [*overrides, *budget], steps
    with tempfile.TemporaryDirectory() as tmp:
        store = args.store.resolve() if args.store else Path(tmp)
        found = scored_jobs(store, jobs, seeds, args.workers, ledger)
    rows = []
    for name in names:
        overrides, _, _, _, paper, score = WORKLOADS[name]
        fp32, mixed = ({key: [found[name, seed, label].get(key, float("nan")) for seed in seeds]
                        for key in (FINAL, KEPT)} for label in LABELS)
        for seed in seeds:
            print(f"{name} seed {seed}: " + "  ".join(
                f"{key} fp32 {fp32[key][seed]:.1f} mixed {mixed[key][seed]:.1f}"
                for key in (FINAL, KEPT)), flush=True)
        mixed_job = job_config(*overrides, "tracking=none", "platform=versal",
                               "precision=mixed")[0]
        reduced = reduced_forward_layers(mixed_job)
        solved = gym.spec(mixed_job.env.id).reward_threshold
        for key in (score, *({FINAL, KEPT} - {score})):  # the scored return first
            rows.append((name, paper, key, key == score, np.array(fp32[key]),
                         np.array(mixed[key]), reduced, solved))
    scores = {}
    for name, _, key, _, a, b, _, _ in rows:
        scores[f"{name}/{key}/error"] = np.stack([a, b], axis=1)
        scores[f"{name}/{key}/floor"] = np.stack([a, a], axis=1)
    cis = intervals(scores, SMOKE_REPS if args.smoke else REPS)
    out = []
    for name, paper, key, scored, a, b, reduced, solved in rows:
        error = float(error_of_means(scores[f"{name}/{key}/error"])[0])
        low, high = cis.get(f"{name}/{key}/error", (float("nan"),) * 2)
        floor = cis.get(f"{name}/{key}/floor", (float("nan"),) * 2)[1]
        per_seed = statistics.fmean(abs(y - x) / max(abs(x), 1e-12) * 100 for x, y in zip(a, b))
        signed = change_of_means(scores[f"{name}/{key}/error"])  # > 0: mixed higher
        ok = error <= GOAL_PCT and (not np.isfinite(floor) or error <= floor)
        judged = verdict(ok) if reduced else "not measured: all fp32"
        solved_seeds = f"{(a >= solved).sum()} · {(b >= solved).sum()} (>= {solved:g})"
        out.append((name, len(a), reduced, key if scored else f"({key})", f"{a.mean():.1f}",
                    f"{b.mean():.1f}", f"{signed:+.2f}", solved_seeds, f"{per_seed:.2f}",
                    f"**{error:.2f}** [{low:.2f}, {high:.2f}]", f"{floor:.2f}", f"{paper:.2f}",
                    judged if scored else "(for comparison)"))
    table(["workload", "seeds", "reduced forward layers", "return (scored, or in brackets)",
           "fp32 (mean)",
           "mixed (mean)", "mixed vs fp32 % (signed)", "seeds solved fp32 · mixed (return)",
           "error per seed %", "error of the means % [95% CI]", "fp32 noise floor %", "paper %",
           f"goal <= {GOAL_PCT} and inside the floor"], out,
          title="Reward error of hardware-aware mixed precision (versal plan) vs fp32, "
                "on deterministic evaluations")


if __name__ == "__main__":  # stopped (its job checkpointed), this command again goes on
    exit_on_stop(main, go_on=shlex.join(["python", *sys.argv]))
    write_results()
