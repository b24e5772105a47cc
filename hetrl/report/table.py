"""The report's summary table: a row per job, the options that vary across the sweep, the
status, the key metrics (where a job has them) and a link to its video (where one has one)."""

from __future__ import annotations

from dataclasses import dataclass

from hetrl.report.runs import Sweep

KEY_METRICS = ("return_mean_100", "eval/return_mean", "reward_error_pct", "eps_platform",
               "eps_host", "sps", "updates")
"""The metrics every table shows where any job logged them (`eps_platform` is modeled; the
others are measured)."""


@dataclass(frozen=True)
class Link:
    """A cell that links `href`."""

    text: str
    href: str


@dataclass
class Table:
    header: list[str]
    rows: list[list[str | Link]]


def summary_table(sweep: Sweep, front: set[str] | frozenset[str] = frozenset()) -> Table:
    """Run name, status, each varying option, the key metrics any job has, its video (if any
    job has one), and whether the job is on a Pareto front (`front`: run ids); a row per job
    of the sweep, failed and killed ones included."""
    metrics = [m for m in KEY_METRICS if any(m in job.metrics for job in sweep.jobs)]
    videos = any(job.video for job in sweep.jobs)
    header = ["run", "status", *sweep.keys, *metrics, *(["video"] if videos else []),
              "Pareto front"]
    rows = [[sweep.label(job), job.status, *(job.option(k) for k in sweep.keys),
             *(_fmt(job.metrics.get(m)) for m in metrics),
             *([Link("video", job.video) if job.video else ""] if videos else []),
             "yes" if job.run.info.run_id in front else ""]
            for job in sweep.jobs]
    return Table(header, rows)


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"
