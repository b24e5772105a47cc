"""The Pareto front of speedup (higher is better) against reward error (lower is better)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from hetrl.report.runs import Sweep


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """The indices of the non-dominated points of (speedup, reward error), in order of
    increasing speedup. A point is dominated when another is at least as fast and at most as
    wrong, and strictly better in one of the two; equal points dominate neither, so both stay
    on the front."""
    front = []
    for i, (x, y) in enumerate(points):
        dominated = any(
            (qx >= x and qy <= y) and (qx > x or qy < y) for j, (qx, qy) in enumerate(points)
            if j != i)
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: (points[i][0], points[i][1]))


@dataclass
class Point:
    """One job on the Pareto chart."""

    run_id: str
    name: str
    platform: str
    precision: str
    eps: float  # samples/s, modeled or measured as its panel says
    speedup: float  # eps over the panel's slowest job's
    error: float  # reward_error_pct; 0 for an fp32 job, the reference of the others


@dataclass
class Panel:
    """The jobs whose throughput is of one kind: modeled (`eps_platform`: the job ran on a
    modeled platform) or measured (`eps_host`: on this host)."""

    metric: str
    points: list[Point]
    slowest: Point  # what the speedups are over

    @property
    def modeled(self) -> bool:
        return self.metric == MODELED

    @property
    def front(self) -> list[int]:
        return pareto_front([(p.speedup, p.error) for p in self.points])


MODELED, MEASURED = "eps_platform", "eps_host"


def panels(sweep: Sweep) -> tuple[list[Panel], list[str]]:
    """The Pareto chart's panels of the sweep's finished jobs (modeled first) and the jobs it
    leaves out, each with why. A job's x is its `eps_platform` where it has one (modeled),
    else its `eps_host` (measured): the two never share an axis. The speedup is over the
    panel's slowest job, from EPS, because each job's `speedup_vs_<baseline>` is over a
    baseline plan of its own platform and precision and so does not compare across jobs. A
    job without `reward_error_pct` is at 0 % when its precision is fp32 (the reference of the
    others), else left out."""
    by_metric: dict[str, list[Point]] = {MODELED: [], MEASURED: []}
    left_out = []
    for job in sweep.plotted:
        metrics, name = job.metrics, sweep.label(job)
        metric = MODELED if MODELED in metrics else MEASURED
        if not metrics.get(metric, 0.0) > 0:  # no update, no throughput
            left_out.append(f"{name} (no {MODELED} or {MEASURED})")
            continue
        error = metrics.get("reward_error_pct")
        if error is None and job.option("precision") != "fp32":
            left_out.append(f"{name} (no reward_error_pct)")
            continue
        by_metric[metric].append(Point(job.run.info.run_id, name, job.option("platform"),
                                       job.option("precision"), metrics[metric], 1.0,
                                       0.0 if error is None else error))
    found = []
    for metric, points in by_metric.items():
        if not points:
            continue
        slowest = min(points, key=lambda p: p.eps)
        for point in points:
            point.speedup = point.eps / slowest.eps
        found.append(Panel(metric, points, slowest))
    return found, left_out
