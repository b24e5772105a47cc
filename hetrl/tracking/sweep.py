"""A Hydra callback that makes a multirun one MLflow parent run with each job a child.

The parent opens with the sweep's first job (a sweep Hydra rejects before any job runs
leaves no run). It gets a summary table (CSV and markdown) of every job of the sweep: each
child's choices, final metrics and status, and the jobs that never started, rewritten after
each job so that a sweep cut short still has one. Hydra skips `on_multirun_end` when a job
failed, so the parent is also closed at exit. SIGINT/SIGTERM between two jobs stop the sweep
(during a job, the job's own handler stops it after a checkpoint): the parent ends KILLED.
"""

from __future__ import annotations

import atexit
import csv
import io
import os
import signal
import threading
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from hetrl.faults import Stopped

PARENT_ENV = "HETRL_PARENT_RUN_ID"  # read by the jobs' tracking config
CHOICE_TAGS = ("algo", "env", "platform", "precision", "partitioner", "scheduler", "replay",
               "seed")
NOT_STARTED = "NOT_STARTED"  # the status column of a job the sweep never reached
SUMMARY_METRICS = ("return_mean_100", "reward_error_pct", "sps", "eps_host", "eps_platform",
                   "updates")


class MlflowSweep(Callback):
    def __init__(self, uri: str | None, experiment: str | None) -> None:
        self.uri, self.experiment = uri, experiment
        self.client = None
        self.parent_id: str | None = None
        self.keys: list[str] = []  # config keys set on the command line: columns of the summary
        self.config: DictConfig | None = None  # the multirun's, until the parent opens
        self.jobs: list[list[str]] | None = None  # each job's overrides (None: not known)
        self.stopped: int | None = None  # the signal that stopped the sweep between jobs
        self._handlers: dict[int, Any] = {}

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if self.uri is None:  # tracking=none
            return
        self.config = config
        keys = [o.split("=", 1)[0].lstrip("+~") for o in config.hydra.overrides.task if "=" in o]
        self.keys = [k for k in keys if k not in CHOICE_TAGS and k != "tracking.uri"
                     and not k.startswith("hydra.")]
        self.jobs = _sweep_jobs(config)
        if threading.current_thread() is threading.main_thread():
            self._handlers = {s: signal.signal(s, self._stop) for s in (signal.SIGINT,
                                                                          signal.SIGTERM)}
        atexit.register(self._close)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        if self.config is not None and self.parent_id is None:
            self._open_parent(self.config)

    def _open_parent(self, config: DictConfig) -> None:
        from hetrl.tracking.mlflow import client_for

        self.client, experiment_id = client_for(self.uri, self.experiment)
        sweep_dir = str(config.hydra.sweep.dir)
        run = self.client.create_run(
            experiment_id,
            run_name=f"sweep-{Path(sweep_dir).name}",
            tags={"sweep": "true", "sweep_dir": sweep_dir,
                  "overrides": " ".join(config.hydra.overrides.task)},
        )
        self.parent_id = run.info.run_id
        os.environ[PARENT_ENV] = self.parent_id

    def _stop(self, signum: int, frame: object) -> None:
        """A signal between two jobs (a job's loop installs its own): stop the sweep."""
        self.stopped = signum
        raise Stopped(signum)

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if self.parent_id is not None:
            self._write_summary()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._close()

    def _children(self) -> list:
        parent = self.client.get_run(self.parent_id)
        return self.client.search_runs(
            [parent.info.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{self.parent_id}'",
            order_by=["attributes.start_time ASC"],
        )

    def _write_summary(self) -> tuple[list, int]:
        """Write the summary of every job; the children and the number of jobs that never
        started (the basic sweeper runs its jobs in order: the first len(children) ran)."""
        children = self._children()
        header = ["run", *CHOICE_TAGS, *self.keys, "status", *SUMMARY_METRICS]
        rows = [
            [run.info.run_name, *(run.data.tags.get(t, "") for t in CHOICE_TAGS),
             *(run.data.params.get(k, "") for k in self.keys), run.info.status,
             *(_fmt(run.data.metrics.get(m)) for m in SUMMARY_METRICS)]
            for run in children
        ]
        not_started = (self.jobs or [])[len(children):]
        for num, job in enumerate(not_started, start=len(children)):
            given = dict(o.split("=", 1) for o in job if "=" in o)
            rows.append([f"job {num}", *(given.get(t, "") for t in CHOICE_TAGS),
                         *(given.get(k, "") for k in self.keys), NOT_STARTED,
                         *("" for _ in SUMMARY_METRICS)])
        counts = {s: sum(r.info.status == s for r in children)
                  for s in ("FINISHED", "FAILED", "KILLED")}
        text = io.StringIO()
        csv.writer(text).writerows([header, *rows])
        self.client.log_text(self.parent_id, text.getvalue(), "summary.csv")
        table = [f"| {' | '.join(header)} |", f"|{'---|' * len(header)}"]
        table += [f"| {' | '.join(row)} |" for row in rows]
        counted = (f"{len(rows)} jobs: {counts['FINISHED']} finished, {counts['FAILED']} failed, "
                   f"{counts['KILLED']} killed, {len(not_started)} not started")
        self.client.log_text(self.parent_id, "\n".join([counted, "", *table, ""]), "summary.md")
        for key, value in (("jobs", len(rows)), ("jobs_finished", counts["FINISHED"]),
                           ("jobs_failed", counts["FAILED"]), ("jobs_killed", counts["KILLED"]),
                           ("jobs_not_started", len(not_started))):
            self.client.log_metric(self.parent_id, key, value)
        return children, len(not_started)

    def _close(self) -> None:
        for sig, handler in self._handlers.items():
            signal.signal(sig, handler)
        self._handlers = {}
        if self.parent_id is None:
            return
        children, not_started = self._write_summary()
        statuses = {run.info.status for run in children}
        cut_short = self.stopped is not None or not_started or "RUNNING" in statuses
        status = ("FAILED" if "FAILED" in statuses
                  else "KILLED" if "KILLED" in statuses or cut_short else "FINISHED")
        self.client.set_terminated(self.parent_id, status=status)
        os.environ.pop(PARENT_ENV, None)
        self.parent_id = None


def _sweep_jobs(config: DictConfig) -> list[list[str]] | None:
    """Each job's overrides, in the order Hydra's BasicSweeper launches them (None for
    another sweeper, or overrides this parser cannot expand)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    sweeper = config.hydra.sweeper
    if sweeper.get("_target_") != f"{BasicSweeper.__module__}.{BasicSweeper.__name__}":
        return None
    params = [f"{key}={value}" for key, value in (sweeper.get("params") or {}).items()]
    try:
        overrides = OverridesParser.create().parse_overrides(
            [*params, *config.hydra.overrides.task])
        return [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]
    except Exception:  # e.g. glob(): expanding it needs Hydra's config loader
        return None


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"
