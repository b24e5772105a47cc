"""Shared helpers: compose configs in-process, run jobs in-process or through `python -m hetrl`,
and read the real MLflow store they wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

from hetrl import experiment
from hetrl.build import Components, build
from hetrl.config.store import register
from hetrl.options import compose_job

register()


def build_job(*overrides: str, plan: bool = False) -> Components:
    """The components `python -m hetrl <overrides>` would train with (its step planned on
    the platform only with `plan`)."""
    cfg, _ = compose_job(*overrides)
    return build(cfg, plan=plan)


def run_job(tmp_path: Path, *overrides: str) -> dict:
    """Run one job in this process, tracking to a sqlite store under tmp_path."""
    cfg, choices = compose_job(f"tracking.uri={tracking_uri(tmp_path)}", *overrides)
    out = tmp_path / f"job{len(list(tmp_path.glob('job*')))}"
    out.mkdir()
    return experiment.run(cfg, choices, out)


def tracking_uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def hetrl_cli(tmp_path: Path, *args: str, timeout: float = 600,
              uri: str | None = None) -> subprocess.CompletedProcess:
    """`python -m hetrl <args>` in tmp_path, tracking there (or to `uri`: a tracking
    server's); outputs captured."""
    flags = [a for a in args if a.startswith("-")]
    overrides = [a for a in args if not a.startswith("-")]
    return subprocess.run(
        [sys.executable, "-m", "hetrl", *flags, f"tracking.uri={uri or tracking_uri(tmp_path)}",
         *overrides],
        cwd=tmp_path, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "HYDRA_FULL_ERROR": "0"},
    )


def mlflow_runs(tmp_path: Path) -> list:
    client = MlflowClient(tracking_uri(tmp_path))
    experiment_ = client.get_experiment_by_name("hetrl")
    return client.search_runs([experiment_.experiment_id], order_by=["attributes.start_time ASC"])


def metric_history(tmp_path: Path, run_id: str, key: str) -> list[tuple[int, float]]:
    client = MlflowClient(tracking_uri(tmp_path))
    return [(m.step, m.value) for m in client.get_metric_history(run_id, key)]



