"""Many job starts on sqlite stores, 8 at a time: lost runs and "database is locked" errors,
hetrl's store (hetrl.tracking.mlflow.client_for: WAL, busy timeout, schema and experiment
created under a file lock) beside plain MLflow on the same load in the same run. The anchor is
MLflow's own report of 6 failed starts in 1,803 without WAL; the goal is 0 lost runs and 0
"database is locked" in >= 1,800 starts with 8 concurrent jobs.

    python benchmarks/job_starts.py               # 1,800 starts per store kind, 8 at a time
    python benchmarks/job_starts.py --smoke       # 1 start on a new store of each kind
    python benchmarks/job_starts.py --kinds hetrl --starts 3600

A job is a process of its own (forked from this one, which has imported MLflow but opened no
store), as a parallel sweep's job is: it opens the store and the experiment, creates its run,
logs 1,000 steps of 5 metrics in 10 batches and ends the run FINISHED. The jobs run
`--concurrent` at a time, a new one starting as soon as one ends; every `--per-store` starts
go to a new store, whose first `--concurrent` jobs start together (the race on a new store's
tables). A run is lost when its job failed or the store does not hold it FINISHED with its
1,000 steps (all of a store's runs when the store cannot be opened afterwards: a schema
migration two jobs raced through can leave it half made).
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import tempfile
import time
import traceback
from pathlib import Path

from common import host_line, parse_args, table, write_results
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from hetrl.tracking.mlflow import all_runs, client_for, store_uri

KINDS = ("hetrl", "mlflow")
EXPERIMENT = "starts"
STEPS, BATCH, KEYS = 1000, 100, 5
SMOKE = {"starts": 1, "per_store": 1, "concurrent": 1}
"""--smoke: one job start on a new store of each kind."""


def open_store(kind: str, uri: str) -> tuple[MlflowClient, str]:
    """hetrl's client and experiment id, or MLflow's own (no WAL, no busy timeout, no lock)."""
    if kind == "hetrl":
        return client_for(uri, EXPERIMENT)
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(EXPERIMENT)
    return client, found.experiment_id if found else client.create_experiment(EXPERIMENT)


def job(kind: str, uri: str, name: str, out) -> None:
    """One job start, as a sweep's job makes it; what went wrong, if anything, to `out`."""
    try:
        client, experiment_id = open_store(kind, uri)
        run_id = client.create_run(experiment_id, run_name=name).info.run_id
        for first in range(0, STEPS, BATCH):
            now = int(time.time() * 1000)
            client.log_batch(run_id, metrics=[Metric(f"m{k}", float(s), now, s)
                                              for k in range(KEYS)
                                              for s in range(first, first + BATCH)])
        client.set_terminated(run_id, "FINISHED")
        out.put((name, None))
    except Exception:  # noqa: BLE001 - counted: this is what the benchmark measures
        out.put((name, traceback.format_exc()))


def kept(uri: str, names: list[str]) -> set[str]:
    """The runs of `names` the store holds FINISHED with all their steps."""
    client = MlflowClient(tracking_uri=store_uri(uri))
    experiment = client.get_experiment_by_name(EXPERIMENT)
    if experiment is None:
        return set()
    runs = all_runs(client, [experiment.experiment_id])
    return {r.info.run_name for r in runs if r.info.status == "FINISHED"
            and len(client.get_metric_history(r.info.run_id, "m0")) == STEPS} & set(names)


def measure(kind: str, starts: int, concurrent: int, per_store: int, folder: Path
            ) -> dict[str, float]:
    """Lost runs, "database is locked" errors, other errors and starts/s of `starts` jobs."""
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    errors: dict[str, str] = {}
    lost, broken, began = 0, 0, time.perf_counter()
    for store in range(0, starts, per_store):
        uri = f"sqlite:///{folder / f'{kind}-{store // per_store}.db'}"
        names = [f"job{n}" for n in range(store, min(starts, store + per_store))]
        todo, running, done = list(names), [], 0
        while done < len(names):
            while todo and len(running) < concurrent:
                process = ctx.Process(target=job, args=(kind, uri, todo.pop(0), out))
                process.start()
                running.append(process)
            name, error = out.get(timeout=600)
            done += 1
            if error is not None:
                errors[name] = error
            for process in [p for p in running if not p.is_alive()]:
                process.join()
                running.remove(process)
        for process in running:
            process.join()
        try:
            lost += len(names) - len(kept(uri, names))
        except Exception:  # noqa: BLE001 - a store its jobs' races left unreadable
            lost, broken = lost + len(names), broken + 1
            errors.setdefault(f"store {uri}", traceback.format_exc())
    seconds = time.perf_counter() - began
    locked = sum("database is locked" in e for e in errors.values())
    return {"lost": lost, "locked": locked, "other": len(errors) - locked - broken,
            "broken": broken,
            "starts_per_s": starts / seconds, "example": next(iter(errors.values()), "")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="1 start per store kind")
    parser.add_argument("--starts", type=int, default=1800)
    parser.add_argument("--concurrent", type=int, default=8)
    parser.add_argument("--per-store", type=int, default=200,
                        help="starts on one store before the next starts a new one")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"which of {', '.join(KINDS)}")
    args = parse_args(parser)
    if args.smoke:
        vars(args).update(SMOKE)
    kinds = args.kinds.split(",")
    if unknown := set(kinds) - set(KINDS):
        parser.error(f"--kinds {args.kinds}: no kind {', '.join(sorted(unknown))}; "
                     f"choose among {', '.join(KINDS)}")
    for name in ("mlflow", "alembic"):  # each job's "Creating initial MLflow database tables"
        logging.getLogger(name).setLevel(logging.WARNING)
    print(host_line("mlflow"))
    rows, examples = [], []
    with tempfile.TemporaryDirectory() as folder:
        for kind in kinds:
            found = measure(kind, args.starts, args.concurrent, args.per_store, Path(folder))
            rows.append((kind, args.starts, found["lost"], found["locked"], found["other"],
                         f"{found['broken']} of {-(-args.starts // args.per_store)}",
                         f"{found['starts_per_s']:.1f}"))
            if found["example"]:
                examples.append(f"{kind}, a failed start:\n{found['example'][-1200:]}")
    table(["store", "starts", "lost runs", '"database is locked"', "other errors",
           "stores left unreadable", "starts/s"],
          rows, title=f"{args.concurrent} concurrent jobs, a new store every {args.per_store} "
                      f"starts; each job: {STEPS} steps x {KEYS} metrics in batches of {BATCH}",
          align="lrrrrrr")
    for example in examples:
        print(example)


if __name__ == "__main__":
    main()
    write_results()
