"""A Hydra callback that makes a multirun one MLflow parent run with each job a child.

The parent opens with the sweep's first job (a sweep Hydra rejects before any job runs
leaves no run). It gets a summary table (CSV and markdown) of every job of the sweep: each
child's choices, final metrics and status, the jobs validation rejected (REJECTED, with the
error: a job that failed before it made a run) and the jobs that never started, rewritten after
each job so that a sweep cut short still has one (a job that never started is found by its
overrides: parallel jobs end in any order). Hydra skips `on_multirun_end` when a job failed,
so the parent is also closed at exit. A sweep with a failed or rejected job ends FAILED, a
stopped one (hetrl.sweep.stops) KILLED; one whose every job was rejected leaves no parent, as a
rejected job leaves no run. Once closed, the parent gets the sweep report (hetrl.report: plots
and one HTML page).
"""

from __future__ import annotations

import atexit
import csv
import io
import logging
import os
import shlex
from pathlib import Path
from typing import Any, Collection, Sequence

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, read_write

from hetrl.config.errors import ConfigError
from hetrl.sweep.stops import runs_elsewhere, stopped_by
from hetrl.tracking.base import JOB_NUM_TAG, REFERENCE_TAG

PARENT_ENV = "HETRL_PARENT_RUN_ID"  # read by the jobs' tracking config
PARENT_KEY = "tracking.parent_run_id"  # the override that carries it to jobs run elsewhere
CHOICE_TAGS = ("algo", "env", "platform", "precision", "partitioner", "scheduler", "replay",
               "seed")
NOT_STARTED = "NOT_STARTED"  # the status column of a job the sweep never reached
REJECTED = "REJECTED"  # the status column of a job validation rejected (it made no run)
REJECTED_TAG = "rejected/"  # + job number: the parent's tag holding that job's ConfigError
SUMMARY_METRICS = ("return_mean_100", "eval/return_mean", "reward_error_pct", "sps", "eps_host",
                   "eps_platform", "phi_d", "updates")

log = logging.getLogger("hetrl")


class MlflowSweep(Callback):
    def __init__(self, uri: str | None, experiment: str | None,
                 view_columns: Sequence[str] | None = None) -> None:
        self.uri, self.experiment = uri, experiment
        self.view_columns = list(view_columns or ())  # hetrl's saved view of the runs table
        self.client = None
        self.parent_id: str | None = None
        self.keys: list[str] = []  # config keys set on the command line: columns of the summary
        self.config: DictConfig | None = None  # the multirun's, until the parent opens
        self.jobs: list[list[str]] | None = None  # each job's overrides (None: not known)
        self.sweep_dir = ""
        self.remote = False  # the launcher runs jobs outside this process
        self.in_worker = False  # this copy was pickled into a launcher's worker

    def __getstate__(self) -> dict:
        """A launcher pickles its callbacks into its workers: a worker's copy gets no client
        (it opens its own)."""
        state = dict(self.__dict__, client=None, in_worker=True)
        return state

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if self.uri is None:  # tracking=none
            return
        self.config = config
        keys = [o.split("=", 1)[0].lstrip("+~") for o in config.hydra.overrides.task if "=" in o]
        self.keys = [k for k in keys if k not in CHOICE_TAGS and k != "tracking.uri"
                     and not k.startswith("hydra.")]
        self.jobs = _sweep_jobs(config)
        self.sweep_dir = str(config.hydra.sweep.dir)
        self.remote = runs_elsewhere(config.hydra.launcher)
        if self.remote:
            self._open_parent(config)
            with read_write(config.hydra.overrides):
                # quoted: an id of digits and one `e` would parse as a float
                config.hydra.overrides.task.append(f"{PARENT_KEY}='{self.parent_id}'")
        atexit.register(self._close)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        if self.config is not None and self.parent_id is None:
            self._open_parent(self.config)

    def _open_parent(self, config: DictConfig) -> None:
        from mlflow.entities import Param

        from hetrl.tracking.mlflow import client_for

        self.client, experiment_id = client_for(self.uri, self.experiment, self.view_columns)
        sweep_dir = str(config.hydra.sweep.dir)
        overrides = list(config.hydra.overrides.task)
        name = sweep_name(overrides, Path(sweep_dir).name)
        run = self.client.create_run(
            experiment_id, run_name=name,
            tags={"sweep": "true", "sweep_dir": sweep_dir, "overrides": " ".join(overrides),
                  "mlflow.note.content": self._description(overrides, experiment_id)},
        )
        self.parent_id = run.info.run_id
        # the last of a repeated key wins, as in Hydra
        params = dict(o.lstrip("+~").split("=", 1) for o in overrides if "=" in o)
        self.client.log_batch(self.parent_id, params=[Param(k, v[:6000])
                                                      for k, v in params.items()])
        if not self.remote:
            os.environ[PARENT_ENV] = self.parent_id
        log.info("%s", self._where(name, experiment_id))

    def _description(self, overrides: list[str], experiment_id: str) -> str:
        """The parent's description (markdown): the sweep's command, and a link to the
        experiment's runs in hetrl's saved view, where it has one."""
        from hetrl.tracking.mlflow import VIEW_NAME, view_route

        text = f"```\npython -m hetrl -m {' '.join(overrides)}\n```"
        if self.view_columns:
            text += f"\n\nThe runs side by side: [{VIEW_NAME}](#{view_route(experiment_id)})"
        return text

    def _where(self, name: str, experiment_id: str) -> str:
        """The parent run, and where the UI shows the runs side by side (or the parent)."""
        from hetrl.tracking.mlflow import ui_url, view_route

        route = (view_route(experiment_id) if self.view_columns
                 else f"/experiments/{experiment_id}/runs/{self.parent_id}")
        seen = "the runs side by side" if self.view_columns else "the parent"
        return f"{name}: MLflow parent run {self.parent_id}; {seen}: {ui_url(self.uri, route)}"

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if self.parent_id is None:
            return
        self._note_rejection(config.hydra.job.num, job_return)
        if not self.in_worker:
            self._write_summary()
            return
        try:  # a worker's summary is a progress report: the final one is this process's
            self._write_summary()
        except Exception as error:  # noqa: BLE001 - never fail a finished job for it
            log.warning("sweep summary not rewritten: %s", error)

    def _note_rejection(self, num: int, job_return: JobReturn) -> None:
        """A job that validation rejected: its error, in one line, as a tag of the parent (a
        launcher's worker writes it there too: the launching process reads it back)."""
        from mlflow.utils.validation import MAX_TAG_VAL_LENGTH

        error = job_return._return_value  # `return_value` re-raises a failed job's error
        if job_return.status == JobStatus.FAILED and isinstance(error, ConfigError):
            self._client().set_tag(self.parent_id, f"{REJECTED_TAG}{num}",
                                   " ".join(str(error).split())[:MAX_TAG_VAL_LENGTH])

    def _client(self):
        if self.client is None:
            from hetrl.tracking.mlflow import client_for

            self.client, _ = client_for(self.uri, self.experiment)
        return self.client

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._close()

    def _write_summary(self) -> tuple[list, int, int]:
        """Write the summary of every job; the children (jobs and the reference runs they
        trained), the number of jobs that never started and the number rejected."""
        from hetrl.tracking.mlflow import sweep_children

        jobs, references = sweep_children(self._client(), self.parent_id)
        header = ["job", "run", *CHOICE_TAGS, *self.keys, "status", *SUMMARY_METRICS]
        numbered = [
            (_job_num(run), [run.info.run_name, *(run.data.tags.get(t, "") for t in CHOICE_TAGS),
                             *(run.data.params.get(k, "") for k in self.keys), run.info.status,
                             *(_fmt(run.data.metrics.get(m)) for m in SUMMARY_METRICS)])
            for run in jobs
        ]
        rejected = self._rejections(ran={num for num, _ in numbered})
        not_started = _not_started(self.jobs or [], jobs, rejected)
        numbered += [(num, self._unrun_row(job, NOT_STARTED)) for num, job in not_started]
        numbered += [(num, self._unrun_row(self._job(num), REJECTED)) for num in rejected]
        # in the sweep's order, whatever order a parallel launcher ran the jobs in
        numbered.sort(key=lambda item: float("inf") if item[0] is None else item[0])
        if rejected:  # the error column: only a sweep with a rejected job has one
            header.append("error")
            numbered = [(num, [*row, rejected.get(num, "")]) for num, row in numbered]
        rows = [["" if num is None else str(num), *row] for num, row in numbered]
        counts = {s: sum(r.info.status == s for r in jobs)
                  for s in ("FINISHED", "FAILED", "KILLED")}
        failed = counts["FAILED"] + len(rejected)
        counted = (f"{len(rows)} jobs: {counts['FINISHED']} finished, {failed} failed"
                   + (f" ({len(rejected)} rejected before they ran)" if rejected else "")
                   + f", {counts['KILLED']} killed, {len(not_started)} not started"
                   + (f"; {len(references)} reference runs trained by the jobs (children tagged "
                      f"{REFERENCE_TAG}, not in the table)" if references else ""))
        self._log_tables(header, rows, counted)
        for key, value in (("jobs", len(rows)), ("jobs_finished", counts["FINISHED"]),
                           ("jobs_failed", failed), ("jobs_rejected", len(rejected)),
                           ("jobs_killed", counts["KILLED"]),
                           ("jobs_not_started", len(not_started))):
            self.client.log_metric(self.parent_id, key, value)
        self._log_portability(jobs)
        self._log_seed_reward_errors(jobs)
        return [*jobs, *references], len(not_started), len(rejected)

    def _log_tables(self, header: list[str], rows: list[list[str]], counted: str) -> None:
        """summary.csv, and summary.md: the `counted` line above the table."""
        text = io.StringIO()
        csv.writer(text).writerows([header, *rows])
        self.client.log_text(self.parent_id, text.getvalue(), "summary.csv")
        cells = [[cell.replace("|", r"\|") for cell in row] for row in rows]  # e.g. an error's
        table = [f"| {' | '.join(header)} |", f"|{'---|' * len(header)}",
                 *(f"| {' | '.join(row)} |" for row in cells)]
        self.client.log_text(self.parent_id, "\n".join([counted, "", *table, ""]), "summary.md")

    def _rejections(self, ran: set[int | None]) -> dict[int, str]:
        """job number -> error of each job validation rejected (the parent's REJECTED_TAG
        tags), less a job that made a run after all: its row is the run's."""
        tags = self.client.get_run(self.parent_id).data.tags
        found = {int(k.removeprefix(REJECTED_TAG)): v for k, v in tags.items()
                 if k.startswith(REJECTED_TAG)}
        return {num: found[num] for num in sorted(found) if num not in ran}

    def _job(self, num: int) -> list[str]:
        """Job `num`'s overrides, where the sweep's job list is known."""
        jobs = self.jobs or []
        return jobs[num] if num < len(jobs) else []

    def _unrun_row(self, job: list[str], status: str) -> list[str]:
        """The row of a job that made no run (`status`): what its overrides choose."""
        given = dict(o.split("=", 1) for o in job if "=" in o)
        return ["", *(given.get(t, "") for t in CHOICE_TAGS),
                *(given.get(k, "") for k in self.keys), status, *("" for _ in SUMMARY_METRICS)]

    def _log_seed_reward_errors(self, children: list) -> None:
        """The reward error of the seed means, its interval and the fp32 noise floor
        (hetrl.tracking.seeds), where the sweep has seeds of fp32 and another precision."""
        from hetrl.tracking.seeds import seed_reward_errors

        found = seed_reward_errors(children, self.keys)
        if found is not None:
            text, metrics = found
            self.client.log_text(self.parent_id, text, "seed_reward_error.csv")
            for key, value in metrics.items():
                self.client.log_metric(self.parent_id, key, value)

    def _log_portability(self, children: list) -> None:
        """PEARL's Φ(P) (Eq. 7) where the sweep spans platforms: per setting, the harmonic
        mean over platforms of each one's best EPS (0 where a job failed)."""
        text = platform_portability(children, self.keys)
        if text is None:
            return
        table, phis = text
        self.client.log_text(self.parent_id, table, "portability.csv")
        for key, phi in phis.items():
            self.client.log_metric(self.parent_id, key, phi)

    def _close(self) -> None:
        if self.parent_id is None:
            return
        if self.in_worker:
            return
        children, not_started, rejected = self._write_summary()
        sweep_dir = Path(self.client.get_run(self.parent_id).data.tags.get("sweep_dir", "."))
        started = sweep_dir.is_dir() and any(p.is_dir() for p in sweep_dir.iterdir())
        stopped = stopped_by(self.sweep_dir) is not None
        statuses = {run.info.status for run in children}
        cut_short = stopped or not_started or "RUNNING" in statuses
        status = ("FAILED" if "FAILED" in statuses or rejected
                  else "KILLED" if "KILLED" in statuses or cut_short else "FINISHED")
        os.environ.pop(PARENT_ENV, None)
        parent_id, self.parent_id = self.parent_id, None
        self.client.set_terminated(parent_id, status=status)
        if not children and not stopped and (rejected and not not_started
                                             or self.remote and not started):
            # no job made a run: validation rejected every one, or Hydra rejected the sweep
            # before any ran (a launcher's parent opens at multirun start)
            self.client.delete_run(parent_id)
            return
        self._log_report(parent_id)

    def _log_report(self, parent_id: str) -> None:
        """The sweep report (hetrl.report) in the parent run, once the sweep is closed: a
        report that fails is a warning, never the sweep's failure."""
        try:
            from hetrl.report import log_report  # matplotlib: only when a sweep ends

            log_report(self.client, parent_id)
        except (Exception, KeyboardInterrupt) as error:  # noqa: BLE001 - the runs are logged
            log.warning("sweep report not written: %s", str(error) or type(error).__name__)


def platform_portability(children: list, keys: list[str]) -> tuple[str, dict[str, float]] | None:
    """Φ(P) of the jobs that differ only in platform: a CSV (setting, platforms, Φ) and the
    metrics `phi_p` (one setting) or `phi_p/<setting>`; None without two platforms. A job's
    best EPS is its composer's best candidate, else `eps_platform`, else `eps_host`."""
    from hetrl.partition.composer import portability

    groups: dict[str, dict[str, float]] = {}
    for run in children:
        tags, metrics = run.data.tags, run.data.metrics
        setting = ",".join([f"{t}={tags.get(t, '')}" for t in CHOICE_TAGS if t != "platform"]
                           + [f"{k}={run.data.params.get(k, '')}" for k in keys])
        best = next((metrics[m] for m in ("composer/eps_best", "eps_platform",
                                          "host/composer/eps_best", "eps_host")
                     if m in metrics), 0.0)
        if run.info.status != "FINISHED":
            best = 0.0
        platform = tags.get("platform", "")
        group = groups.setdefault(setting, {})
        group[platform] = max(group.get(platform, 0.0), best)
    if not any(len(g) > 1 for g in groups.values()):
        return None
    rows, phis = ["setting,platforms,phi_p"], {}
    for k, (setting, best) in enumerate(groups.items()):
        phi = portability(list(best.values()))
        rows.append(f'"{setting}",{"|".join(sorted(best))},{phi:.6g}')
        phis["phi_p" if len(groups) == 1 else f"phi_p/{k}"] = phi
    return "\n".join(rows) + "\n", phis


def sweep_name(overrides: list[str], fallback: str) -> str:
    """The parent's name: what the sweep sweeps (`sweep algo=dqn,ddpg seed=0,1,2`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
        swept = [o.input_line for o in parsed if o.is_sweep_override()]
    except Exception:  # noqa: BLE001 - Hydra parsed them already; never fail the sweep here
        swept = []
    name = "sweep " + " ".join(swept) if swept else f"sweep-{fallback}"
    return name if len(name) <= 250 else name[:249] + "…"


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


def _not_started(jobs: list[list[str]], children: list,
                 rejected: Collection[int] = ()) -> list[tuple[int, list[str]]]:
    """The jobs (number, overrides) that no child ran, less the `rejected` ones: a child is
    matched to a job by its number (`JOB_NUM_TAG`), else by the overrides of the command that
    reproduces it (its `command` tag), whatever order the jobs ran in; a child that names no
    job of the list is matched to the first one left."""
    left = {num: job for num, job in enumerate(jobs) if num not in rejected}
    for run in children:
        given = _overrides(run.data.tags.get("command", ""))
        num = _job_num(run)
        if num not in left:
            num = next((n for n, job in left.items() if _overrides(job) == given), None)
        if num is None and left:
            num = next(iter(left))
        left.pop(num, None)
    return list(left.items())


def _job_num(run: Any) -> int | None:
    """The job's number in its sweep (`JOB_NUM_TAG`), if it has one."""
    num = run.data.tags.get(JOB_NUM_TAG, "")
    return int(num) if num.isdigit() else None


def _overrides(command: str | list[str]) -> dict[str, str]:
    """key -> value of a command line (`python -m hetrl a=1 b=2`) or a list of overrides,
    less the parent run id a launcher passes its jobs."""
    try:
        words = shlex.split(command) if isinstance(command, str) else command
    except ValueError:
        return {}
    pairs = (w.split("=", 1) for w in words if "=" in w)
    return {k.lstrip("+~"): v for k, v in pairs if k.lstrip("+~") != PARENT_KEY}


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"
