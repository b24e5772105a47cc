"""Read a sweep from MLflow: its parent run, its children, the options that vary across them,
their learning curves, their episode videos and PEARL's Φ(P)."""

from __future__ import annotations

import csv
import io
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from hetrl.tracking.base import VIDEOS
from hetrl.tracking.mlflow import sweep_children, ui_link

GROUP_TAGS = ("algo", "env", "platform", "precision", "partitioner", "scheduler", "replay",
              "actors", "seed")
"""Options every job names in a tag (its config groups' choices and its seed)."""
NAMED = ("algo", "env", "platform", "precision", "seed")
"""The options a job's run name says (`dqn-cartpole-versal-mixed-s0`)."""
CURVE = "return_mean_100"


class ReportError(ValueError):
    """A sweep that cannot be reported: the message names the bad value."""


@dataclass
class Job:
    """One child run of the sweep; `video`: the UI's address of its episode video, if it
    has one."""

    run: Run
    video: str | None = None

    @property
    def name(self) -> str:
        return self.run.info.run_name or self.run.info.run_id

    @property
    def status(self) -> str:
        return self.run.info.status

    @property
    def metrics(self) -> dict[str, float]:
        return self.run.data.metrics

    @property
    def finished(self) -> bool:
        return self.status == "FINISHED"

    def option(self, key: str) -> str:
        """The job's value of a swept key: a group's choice or the seed from its tag, else the
        resolved config's param (a nested group, `replay/sampler`, by its class)."""
        tags, params = self.run.data.tags, self.run.data.params
        if key in tags:
            return tags[key]
        if key in params:
            return params[key]
        target = params.get(f"{key.replace('/', '.')}._target_")
        return target.rsplit(".", 1)[-1] if target else ""


@dataclass
class Sweep:
    """A sweep's parent run and its jobs, as the report reads them."""

    parent: Run
    jobs: list[Job]
    keys: list[str]  # the options that vary across the jobs, the seed included
    curves: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # by run id
    phis: dict[str, float] = field(default_factory=dict)  # the parent's phi_p, phi_p/<k>
    phi_settings: list[str] = field(default_factory=list)  # portability.csv's, row k: phi_p/<k>

    @property
    def plotted(self) -> list[Job]:
        """The jobs the plots show: the FINISHED ones (FAILED, KILLED: the table only)."""
        return [job for job in self.jobs if job.finished]

    @property
    def settings_keys(self) -> list[str]:
        """The varying options that make a setting: all but the seed."""
        return [k for k in self.keys if k != "seed"]

    def setting(self, job: Job) -> tuple[str, ...]:
        return tuple(job.option(k) for k in self.settings_keys)

    def phi_rows(self) -> list[tuple[str, float]]:
        """PEARL's Φ(P) of each setting of the sweep that spans platforms (label, value); the
        label says what differs between the settings."""
        if "phi_p" in self.phis:
            return [("every job", self.phis["phi_p"])]
        ordered = sorted(self.phis.items(), key=lambda kv: int(kv[0].rsplit("/", 1)[1]))
        labels = phi_setting_labels(self.phi_settings)
        if len(labels) != len(ordered):  # no portability.csv to name them
            labels = [f"setting {key.rsplit('/', 1)[1]}" for key, _ in ordered]
        return [(label, value) for label, (_, value) in zip(labels, ordered)]

    def label(self, job: Job) -> str:
        """The job's run name, and the varying options it does not say (two jobs of a sweep
        over `algo.lr` have the same name)."""
        unsaid = [f"{k}={job.option(k)}" for k in self.keys if k not in NAMED]
        return " ".join([job.name, *unsaid])


def load_sweep(client: MlflowClient, parent_id: str) -> Sweep:
    """The sweep whose parent run is `parent_id`, with the learning curve of each finished
    job and the video of each that has one; the reference runs its jobs trained are not
    among them."""
    parent = client.get_run(parent_id)
    jobs = [Job(run, video(client, run)) for run in sweep_children(client, parent_id)[0]]
    keys = varying_keys(swept_keys(parent), jobs)
    curves = {job.run.info.run_id: [(m.step, m.value) for m in
                                    client.get_metric_history(job.run.info.run_id, CURVE)]
              for job in jobs if job.finished}
    phis = {k: v for k, v in parent.data.metrics.items()
            if k == "phi_p" or k.startswith("phi_p/")}
    return Sweep(parent, jobs, keys, curves, phis,
                 portability_settings(client, parent_id) if phis else [])


def video(client: MlflowClient, run: Run) -> str | None:
    """The UI's address of the run's first episode video (`videos/*.mp4`), where the run
    page plays it; None for a run without one."""
    videos = sorted(f.path for f in client.list_artifacts(run.info.run_id, VIDEOS)
                    if f.path.endswith(".mp4"))
    if not videos:
        return None
    info = run.info  # the run page's artifacts tab, the file chosen
    return ui_link(client.tracking_uri,
                   f"/experiments/{info.experiment_id}/runs/{info.run_id}/artifacts/{videos[0]}")


def swept_keys(parent: Run) -> list[str]:
    """The keys of the sweep's overrides (the parent's params), in the command's order (its
    `overrides` tag)."""
    order = [token.split("=", 1)[0].lstrip("+~")
             for token in parent.data.tags.get("overrides", "").split() if "=" in token]
    params = parent.data.params
    return list(dict.fromkeys([*(k for k in order if k in params), *params]))


def varying_keys(swept: list[str], jobs: list[Job]) -> list[str]:
    """The keys, of the parent's overrides and the groups every job tags, whose value differs
    between two jobs: the sweep's overrides' order first."""
    keys = list(dict.fromkeys([*swept, *GROUP_TAGS]))
    return [k for k in keys if len({job.option(k) for job in jobs}) > 1]


def portability_settings(client: MlflowClient, parent_id: str) -> list[str]:
    """The settings of the parent's `portability.csv` (hetrl.sweep.mlflow), row k being
    the setting of `phi_p/<k>`; none where it is not there."""
    from mlflow.environment_variables import MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR as BAR

    shown = os.environ.get(BAR.name)
    os.environ[BAR.name] = "false"  # a small file: no progress bar on the terminal
    try:
        with tempfile.TemporaryDirectory() as tmp:
            text = Path(client.download_artifacts(parent_id, "portability.csv", tmp)).read_text()
    except Exception:  # noqa: BLE001 - an older parent, or none: Φ without its settings
        return []
    finally:
        if shown is None:
            os.environ.pop(BAR.name)
        else:
            os.environ[BAR.name] = shown
    return [row["setting"] for row in csv.DictReader(io.StringIO(text))]


def phi_setting_labels(settings: list[str]) -> list[str]:
    """portability.csv's settings (`algo=dqn,env=cartpole,...`) cut to what differs between
    them (`precision=fp32 seed=0`)."""
    parsed = [dict(part.split("=", 1) for part in re.split(r",(?=[\w./+~-]+=)", s) if "=" in part)
              for s in settings]
    keys = [k for k in dict.fromkeys(k for p in parsed for k in p)
            if len({p.get(k) for p in parsed}) > 1]
    return [" ".join(f"{k}={p.get(k, '')}" for k in keys) or "every job" for p in parsed]
