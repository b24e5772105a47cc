"""Shared helpers: compose configs in-process, run jobs in-process or through `python -m hetrl`,
read the real MLflow store they wrote, and start a real tracking server."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import torch
from forks import Forked, forked_run
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf

from hetrl import experiment
from hetrl.algos.alphazero import AlphaZero, make_learner
from hetrl.build import Components, build
from hetrl.config.store import register
from hetrl.envs.go import GoGame
from hetrl.options import compose_job, made_option
from hetrl.precision.scaling import LossScaling
from hetrl.tracking.empty_store import empty_store

register()

NOT_MEASURED = ("eval.final=0", "compile=false")
"""What a test's job leaves out when its claim measures neither: the greedy evaluation of the
final policy (the end summary's), and a compiled update (`compile=auto` may pay a compile for a
budget that the job's stop ends early; learning is tested on the eager one)."""


def computed_dtype(t: torch.Tensor) -> torch.dtype:
    """The narrowest dtype whose grid holds every value of `t`: what a layer computed in,
    whether autocast returned that dtype or rounding emulated it in float32."""
    for dtype in (torch.bfloat16, torch.float16):
        if torch.equal(t.float(), t.to(dtype).float()):
            return dtype
    return torch.float32


def loss_scaling(**values: float) -> LossScaling:
    """precision=fp16's loss scaling as its schema sets it, `values` in place of its own."""
    register()
    return dataclasses.replace(made_option("precision", "fp16").loss_scaling, **values)


def tiny_go5() -> tuple[GoGame, AlphaZero]:
    """go5 and an 8-wide AlphaZero of one block searching 8 readouts a move, for the self-play
    worker pools' tests."""
    game = GoGame(5)
    return game, make_learner((game.planes, 5, 5), game.num_actions, width=8, blocks=1,
                              batch_size=8, lr_values=[0.01], lr_boundaries=[], momentum=0.9,
                              l2=1e-4, value_weight=0.5,
                              search={"readouts": 8, "fast_readouts": 4})


def build_job(*overrides: str, plan: bool = False) -> Components:
    """The components `python -m hetrl <overrides>` would train with (its step planned on
    the platform only with `plan`)."""
    cfg, _ = compose_job(*overrides)
    return build(cfg, plan=plan)


def run_job(tmp_path: Path, *overrides: str, ready_store: bool = True) -> dict:
    """Run one job in this process, tracking to a sqlite store under tmp_path: where missing,
    a copy of an empty one, or with `ready_store=False` none, for the job to make (as outside
    the tests: for tests that a rejected job makes none)."""
    if ready_store:
        new_store(tmp_path)
    cfg, choices = compose_job(f"tracking.uri={tracking_uri(tmp_path)}", *overrides)
    out = tmp_path / f"job{len(list(tmp_path.glob('job*')))}"
    out.mkdir()
    return experiment.run(cfg, choices, out)


def new_store(tmp_path: Path) -> None:
    """tmp_path's sqlite store, where missing, as a copy of an empty one (MLflow would make
    it by running its migrations: seconds on a busy host)."""
    store = tmp_path / "mlflow.db"
    if not store.exists():
        shutil.copyfile(empty_store(), store)


def tracking_uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def track_into(cfg: DictConfig, tmp_path: Path) -> None:
    """The job's tracker writes into tmp_path (MLflow's store, TensorBoard's folder), never
    into the working directory's runs/."""
    for key, value in (("uri", tracking_uri(tmp_path)), ("logdir", str(tmp_path / "tb"))):
        if key in cfg.tracking:
            OmegaConf.update(cfg, f"tracking.{key}", value)


def hetrl_cli(tmp_path: Path, *args: str, timeout: float = 600,
              uri: str | None = None) -> subprocess.CompletedProcess:
    """`python -m hetrl <args>` in tmp_path, tracking there (or to `uri`: a tracking
    server's); outputs captured. Forked (tests/forks.py): a test of how a fresh process
    starts (its imports, its first signals) starts one itself."""
    return forked_run(_hetrl_argv(tmp_path, args, uri), tmp_path,
                      {**os.environ, "HYDRA_FULL_ERROR": "0"}, timeout)


def hetrl_started(tmp_path: Path, *args: str, log: Path, uri: str | None = None) -> Forked:
    """`python -m hetrl <args>` started in tmp_path as `hetrl_cli` runs it, in a session of
    its own (a Ctrl-C to its group reaches it and what it starts, nothing else; the session's
    processes are the job's), its output going to `log`."""
    return Forked(_hetrl_argv(tmp_path, args, uri), tmp_path,
                  {**os.environ, "HYDRA_FULL_ERROR": "0"}, log)


def _hetrl_argv(tmp_path: Path, args: tuple[str, ...], uri: str | None) -> list[str]:
    flags = [a for a in args if a.startswith("-")]
    overrides = [a for a in args if not a.startswith("-")]
    return ["-m", "hetrl", *flags, f"tracking.uri={uri or tracking_uri(tmp_path)}", *overrides]


def mlflow_runs(tmp_path: Path) -> list:
    """The runs of experiment `hetrl` in tmp_path's store, oldest first (none without it)."""
    client = MlflowClient(tracking_uri(tmp_path))
    if (experiment_ := client.get_experiment_by_name("hetrl")) is None:
        return []
    return client.search_runs([experiment_.experiment_id], order_by=["attributes.start_time ASC"])


def metric_history(tmp_path: Path, run_id: str, key: str) -> list[tuple[int, float]]:
    client = MlflowClient(tracking_uri(tmp_path))
    return [(m.step, m.value) for m in client.get_metric_history(run_id, key)]


@contextlib.contextmanager
def local_ray() -> Iterator[None]:
    """One local Ray for several jobs, started as a pool of two workers starts it (`init_ray`):
    each job's pool finds it up and leaves it up, rather than starting its own (seconds of
    Ray's processes each), as the jobs of a sweep in one process may share one."""
    import ray

    from hetrl.actors.ray import init_ray

    started = init_ray(None, num_cpus=2)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def tracking_server(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m hetrl.tracking.server <args>`, outputs captured."""
    return subprocess.run([sys.executable, "-m", "hetrl.tracking.server", *args],
                          capture_output=True, text=True, timeout=timeout)


def group_alive(pgid: int) -> list[str]:
    """The live (not zombie) processes of group `pgid`, as `pid command`."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_text().replace("\0", " ")
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(f"{stat.parent.name} {command[:200]}")
    return alive


@contextlib.contextmanager
def tracking_server_up(backend: str) -> Iterator[tuple[str, Path]]:
    """`python -m hetrl.tracking.server up` in a folder of its own (under /tmp, open to others: as
    root PostgreSQL runs as the user postgres, which must reach it): its tracking uri and
    folder; `down` at the end, and then no process of the server's group and no postmaster
    is left."""
    folder = Path(tempfile.mkdtemp(prefix="hetrl-tracking-server-"))
    folder.chmod(0o755)
    up = tracking_server("up", "--backend", backend, "--dir", str(folder),
                         "--port", "0", "--workers", "1")
    state = json.loads((folder / "server.json").read_text()) if up.returncode == 0 else {}
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        (uri,) = re.findall(r"^tracking\.uri=(http://\S+)$", up.stdout, re.MULTILINE)
        yield uri, folder
    finally:
        down = tracking_server("down", "--dir", str(folder), timeout=120)
        postmaster = Path(state.get("postgres", {}).get("data", folder / "none"))
        postmaster = postmaster / "postmaster.pid"
        left = group_alive(state["pid"]) if state else []
        shutil.rmtree(folder, ignore_errors=True)
        assert down.returncode == 0, down.stdout + down.stderr
        assert not left, left
        assert not postmaster.exists()
