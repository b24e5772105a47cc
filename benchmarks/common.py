"""What the benchmarks share: the host they ran on, a job composed, built or run as
`python -m hetrl` would (in-process, or as a `-m` sweep tracked to MLflow), timing through
`torch.utils.benchmark.Timer`, the markdown tables and ratios they print, and the record of
each run they append to `benchmarks/results/<benchmark>.jsonl` (or `--results FILE`).

A benchmark run as `python benchmarks/<name>.py` imports it as `common` (its own folder is
first on `sys.path`); importing it puts the repository root there too.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from omegaconf import DictConfig

from hetrl.config.store import register
from hetrl.options import compose_job
from hetrl.tracking.metadata import git_state

if TYPE_CHECKING:
    from mlflow.entities import Run
    from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

    from hetrl.build import Components

Contender = tuple[Callable[[], object], int]
"""A callable to time and the torch intra-op threads to time it at."""
RESULTS = ROOT / "benchmarks" / "results"
_RUN: dict[str, Any] = {"tables": []}
"""This run's record: its args, code state and results file (`parse_args`), its tables."""


# ---- the host ----------------------------------------------------------------------------


def load_average() -> str:
    return f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cpus"


def host_line(*modules: str) -> str:
    """The CPU (its kind and the 16-bit dtypes it computes natively, which set every speed
    figure), the load, python and the versions of `modules` (torch's always)."""
    import importlib

    from hetrl.platform.host import cpu_name  # torch: not for a process that only tracks

    versions = [f"{m} {importlib.import_module(m).__version__}" for m in ("torch", *modules)]
    return (f"host: {platform.machine()} {cpu_name()}, {load_average()}; "
            f"python {platform.python_version()}, {', '.join(versions)}")


def code_state(ignore: Path | None = None) -> dict[str, str | bool]:
    """The commit (short) and dirty flag of this checkout; changes to `ignore` (a results
    file the run appends to) leave it clean."""
    code = git_state(ROOT, ignore=ignore)
    return {"commit": code.get("commit", "unknown")[:7], "dirty": code.get("dirty") == "true"}


def core_check(min_run_time: float = 0.2) -> str:
    """How much a second intra-op thread helps right now (a 384x384 matmul at 1 and 2
    threads): on a shared host a busy second core makes 2-thread runs many times slower."""
    import torch

    a = torch.randn(384, 384)
    t = median_seconds({"1": (lambda: a @ a, 1), "2": (lambda: a @ a, 2)}, 1, min_run_time)
    speedup = t["1"] / t["2"]
    note = "" if speedup >= 1.3 else "  <-- second core busy: 2-thread figures suffer"
    return f"2-thread matmul speedup {speedup:.2f}x, {load_average()}{note}"


# ---- jobs --------------------------------------------------------------------------------


def job_config(*overrides: str) -> tuple[DictConfig, dict[str, str]]:
    """The config and choices `python -m hetrl <overrides>` would get."""
    _registered()
    return compose_job(*overrides)


@cache
def _registered() -> None:
    """hetrl's schemas in Hydra's ConfigStore, which keeps them: once a process."""
    register()


def build_job(*overrides: str, plan: bool = False) -> Components:
    """The components `python -m hetrl <overrides>` would train with."""
    from hetrl.build import build

    return build(job_config(*overrides)[0], plan=plan)


def tracking_uri(store: Path) -> str:
    return f"sqlite:///{store / 'mlflow.db'}"


def run_job(store: Path, *overrides: str, out: Path | None = None) -> dict[str, Any]:
    """One job in this process through `experiment.run`, tracked to the MLflow store in
    `store` (where a later job finds it as its reference run), its checkpoint in `out` (by
    default a new folder in `store`); its final metrics."""
    from hetrl import experiment

    cfg, choices = job_config(f"tracking.uri={tracking_uri(store)}", *overrides)
    out = out or store / f"job{len(list(store.glob('job*')))}"
    out.mkdir(parents=True, exist_ok=True)
    return experiment.run(cfg, choices, out)


def run_or_resume(store: Path, job_dir: Path, *overrides: str,
                  checkpoint_every: int) -> dict[str, Any]:
    """A long job kept in `job_dir` across sittings: its final metrics read back from its
    MLflow run where it finished, the job resumed from its checkpoint (written every
    `checkpoint_every` env steps) where it was stopped, trained from the start where it never
    reached one."""
    from mlflow.tracking import MlflowClient

    from hetrl import checkpoint

    if (job_dir / checkpoint.FILENAME).is_file():
        run = MlflowClient(tracking_uri(store)).get_run(checkpoint.load(job_dir)["run_id"])
        if run.info.status == "FINISHED":
            return {**run.data.metrics, "run_id": run.info.run_id}
        return run_job(store, f"resume={job_dir}", out=job_dir)
    return run_job(store, *overrides, f"checkpoint_every={checkpoint_every}", out=job_dir)


def sweep(store: Path, *overrides: str) -> list[Run]:
    """`python -m hetrl -m <overrides>` (a Hydra multirun) tracked to the MLflow store in
    `store`; the sweep's jobs as MLflow runs, in the order they ran."""
    from mlflow.tracking import MlflowClient

    store.mkdir(parents=True, exist_ok=True)
    sweep_dir = store / f"sweep{len(list(store.glob('sweep*')))}"
    done = subprocess.run([sys.executable, "-m", "hetrl", "-m", *overrides,
                           f"tracking.uri={tracking_uri(store)}", f"hydra.sweep.dir={sweep_dir}"],
                          cwd=store, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode:
        raise RuntimeError(f"python -m hetrl -m {' '.join(overrides)} failed:\n"
                           + done.stderr[-3000:])
    client = MlflowClient(tracking_uri(store))
    parent = client.search_runs([client.get_experiment_by_name("hetrl").experiment_id],
                                filter_string=f"tags.sweep_dir = '{sweep_dir}'")[0]
    return client.search_runs(
        [parent.info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'",
        order_by=["attributes.start_time ASC"])


def metric_history(store: Path, run_id: str, key: str) -> list[tuple[int, float]]:
    """A run's logged (step, value) points of metric `key`, in step order."""
    from mlflow.tracking import MlflowClient

    points = MlflowClient(tracking_uri(store)).get_metric_history(run_id, key)
    return sorted((p.step, p.value) for p in points)


# ---- the SB3 reference -------------------------------------------------------------------


def _squared_error_dqn() -> type:
    """SB3's DQN, whose loss is Huber's only, with the squared TD error of `algo.td_loss=mse`:
    its `train` runs with SB3's dqn module seeing a torch.nn.functional whose smooth_l1_loss
    is mse_loss (the one F call there), so the update is otherwise SB3's own."""
    import types

    import stable_baselines3.dqn.dqn as sb3_dqn
    import torch.nn.functional as F

    squared = types.SimpleNamespace(**{**vars(F), "smooth_l1_loss": F.mse_loss})

    class SquaredErrorDQN(sb3_dqn.DQN):
        def train(self, *args, **kwargs) -> None:
            sb3_dqn.F = squared
            try:
                super().train(*args, **kwargs)
            finally:
                sb3_dqn.F = F

    return SquaredErrorDQN


def sb3_model(algo: DictConfig, env_id: str, learning_starts: int,
              seed: int = 0) -> OffPolicyAlgorithm:
    """SB3's DQN or DDPG with the hyperparameters of a composed hetrl `algo` config."""
    import gymnasium as gym
    import numpy as np
    from stable_baselines3 import DDPG, DQN
    from stable_baselines3.common.noise import NormalActionNoise

    env = gym.make(env_id)
    kwargs = {"learning_rate": algo.lr, "buffer_size": algo.buffer_size,
              "batch_size": algo.batch_size, "learning_starts": learning_starts,
              "gamma": algo.gamma, "train_freq": algo.train_freq,
              "gradient_steps": algo.gradient_steps,
              "policy_kwargs": {"net_arch": list(algo.hidden)}, "device": "cpu", "seed": seed,
              "verbose": 0}
    if "target_update_interval" in algo:  # DQN; hetrl counts the interval in updates, SB3 in
        # env steps: gradient_steps updates every train_freq env steps
        every = algo.target_update_interval * algo.train_freq // algo.gradient_steps
        dqn = _squared_error_dqn() if algo.td_loss == "mse" else DQN
        return unlogged(dqn("MlpPolicy", env, max_grad_norm=algo.max_grad_norm,
                            target_update_interval=every,
                            exploration_fraction=algo.exploration_fraction,
                            exploration_initial_eps=algo.exploration_initial_eps,
                            exploration_final_eps=algo.exploration_final_eps, **kwargs))
    act_dim = env.action_space.shape[0]
    noise = NormalActionNoise(np.zeros(act_dim), algo.noise_std * np.ones(act_dim))
    return unlogged(DDPG("MlpPolicy", env, tau=algo.tau, action_noise=noise, **kwargs))


@contextmanager
def subnormals(flushed: bool) -> Iterator[None]:
    """Inside, this thread flushes subnormal floats to zero (as every hetrl job does, see
    hetrl.runtime) or computes them (`flushed=False`: torch's default, as SB3 and plain
    PyTorch ship). The mode is per thread and a hetrl job built here leaves it flushed, so a
    peer timed in this process states its mode rather than inherit hetrl's."""
    import torch

    from hetrl.runtime import flushes_subnormals

    was = flushes_subnormals()
    torch.set_flush_denormal(flushed)
    try:
        yield
    finally:
        torch.set_flush_denormal(was)


def unlogged(model: OffPolicyAlgorithm) -> OffPolicyAlgorithm:
    """The model with a logger that writes nowhere: SB3's default one makes a new empty
    `SB3-<date>` folder in the temp dir at every `learn()`, even at verbose=0."""
    from stable_baselines3.common.logger import Logger

    model.set_logger(Logger(None, []))
    return model


def sb3_return_mean_100(model: OffPolicyAlgorithm) -> float | None:
    """The mean return of SB3's last 100 training episodes (its Monitor's, hetrl's
    `return_mean_100`), or None before the first episode ended."""
    episodes = [e["r"] for e in model.ep_info_buffer]
    return float(sum(episodes) / len(episodes)) if episodes else None


# ---- timing ------------------------------------------------------------------------------


def median_seconds(contenders: dict[str, Contender], repeats: int,
                   min_run_time: float) -> dict[str, float]:
    """Median seconds per call of each contender, by `Timer.blocked_autorange`, the
    contenders interleaved over `repeats` rounds so that drift on a noisy host hits them
    alike (each is called once first, to warm up)."""
    from torch.utils.benchmark import Measurement, Timer

    for fn, _ in contenders.values():
        fn()
    rounds = [Timer("fn()", globals={"fn": fn}, label=name, num_threads=threads)
              .blocked_autorange(min_run_time=min_run_time)
              for _ in range(repeats) for name, (fn, threads) in contenders.items()]
    return {m.label: m.median for m in Measurement.merge(rounds)}


# ---- results -----------------------------------------------------------------------------


def parse_args(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The benchmark's args, with `--results FILE`: where `write_results` appends this run's
    record (by default benchmarks/results/<benchmark>.jsonl; a --smoke run only to a FILE
    given). The code state is taken now: the code the run measures, not the code as it ends."""
    parser.add_argument("--results", type=Path, metavar="FILE",
                        help="append this run's tables here as a JSON line (default "
                             "benchmarks/results/<benchmark>.jsonl; --smoke: nowhere)")
    args = parser.parse_args()
    path = args.results or (None if getattr(args, "smoke", False)
                            else RESULTS / f"{Path(sys.argv[0]).stem}.jsonl")
    _RUN.update(path=path, args={k: v for k, v in vars(args).items() if k != "results"},
                code=code_state(ignore=path))
    return args


def append_line(path: Path, record: dict[str, Any]) -> None:
    """`record` as one JSON line at the end of `path` (made with its folder if need be)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(record, default=str) + "\n")


def write_results() -> None:
    """This run's record, appended to its results file (see `parse_args`): the benchmark, the
    commit and dirty flag, the date, the host line, its args and its tables, each table's rows
    as dicts by column."""
    if _RUN.get("path") is None or not _RUN["tables"]:
        return
    append_line(_RUN["path"], {
        "benchmark": Path(sys.argv[0]).stem, **_RUN["code"],
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": host_line(), "args": _RUN["args"], "tables": _RUN["tables"]})
    print(f"\nresults appended to {_RUN['path']}")


def _cell(x: object) -> object:
    return x if x is None or isinstance(x, (bool, int, float, str)) else str(x)


# ---- report ------------------------------------------------------------------------------


def num(x: float) -> str:
    """A rate or a count: thousands separated from 100 up, one decimal below."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}"


def ratio(value: float, reference: float) -> str:
    return f"{value / reference:.2f}x"


def pct(value: float, reference: float) -> str:
    """The change from `reference` in percent ('' for the reference itself)."""
    return "" if value == reference else f"{100 * (value - reference) / reference:+.1f}%"


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def table(header: Sequence[str], rows: Iterable[Sequence[object]],
          title: str | None = None, align: str = "") -> None:
    """A markdown table (cells as given, `str` of anything else), under `title` if any;
    `align` has an `r` for each column to right-align (e.g. "lrr"). The table goes into this
    run's record too (`write_results`)."""
    rows = [list(row) for row in rows]
    _RUN["tables"].append({"title": title, "rows": [dict(zip(header, map(_cell, row)))
                                                     for row in rows]})
    if title:
        print(f"\n{title}\n")
    print(f"| {' | '.join(header)} |")
    print("|" + "".join("---:|" if a == "r" else "---|" for a in align.ljust(len(header), "l")))
    for row in rows:
        print(f"| {' | '.join(map(str, row))} |")
    sys.stdout.flush()
