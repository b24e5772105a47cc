"""The report's summary table: a row per job, the options that vary across the sweep, the
status and the key metrics (where a job has them)."""

from __future__ import annotations

from dataclasses import dataclass

from hetrl.report.runs import Sweep

KEY_METRICS = ("return_mean_100", "eval/return_mean", "reward_error_pct", "eps_platform",
               "eps_host", "sps", "updates")
"""The metrics every table shows where any job logged them (`eps_platform` is modeled; the
others are measured)."""


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]


def summary_table(sweep: Sweep, front: set[str] | frozenset[str] = frozenset()) -> Table:
    """Run name, status, each varying option, the key metrics any job has, and whether the
    job is on a Pareto front (`front`: run ids); a row per job of the sweep, failed and
    killed ones included."""
    metrics = [m for m in KEY_METRICS if any(m in job.metrics for job in sweep.jobs)]
    header = ["run", "status", *sweep.keys, *metrics, "Pareto front"]
    rows = [[sweep.label(job), job.status, *(job.option(k) for k in sweep.keys),
             *(_fmt(job.metrics.get(m)) for m in metrics),
             "yes" if job.run.info.run_id in front else ""]
            for job in sweep.jobs]
    return Table(header, rows)


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"
