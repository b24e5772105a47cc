"""The sweep report's pictures, drawn in the house style of hetrl.tracking.plots and sized for
MLflow's artifact preview (about 700 px wide): the Pareto front, EPS per setting, learning
curves over seeds and the phase breakdown per job."""

from __future__ import annotations

import textwrap
from collections import Counter
from pathlib import Path
from typing import Sequence

import numpy as np

from hetrl.report.pareto import Panel
from hetrl.report.runs import Job, Sweep
from hetrl.tracking.plots import legend_beside  # and matplotlib on its Agg backend

import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

DPI = 100
WIDTH = 5.0  # inches of axes; the legend beside brings a picture to ~700 px
PRECISION_MARKERS = {"fp32": "o", "bf16": "s", "fp16": "^", "mixed": "D", "qat": "P"}
SPARE_MARKERS = ["v", "<", ">", "X", "h", "*"]
LOOP_PHASES = ("act", "env", "replay_add", "rollout_add", "advantages", "sample", "update",
               "priority_update", "publish", "wait", "selfplay", "gating", "eval")
"""The loop's phases (hetrl/scheduler), in the order of its step."""
UPDATE_PARTS = ("target_q", "q_loss", "p_loss", "target_update")
"""Phases a learner times inside its update (MADDPG, MATD3): parts of `update`, not beside it."""


def _colors(names: Sequence[str]) -> dict[str, str]:
    """A colour per name, in a fixed order (tab10, then tab20)."""
    distinct = sorted(set(names))
    cycle = plt.get_cmap("tab10" if len(distinct) <= 10 else "tab20").colors
    return {name: cycle[i % len(cycle)] for i, name in enumerate(distinct)}


def _markers(names: Sequence[str]) -> dict[str, str]:
    spare = iter(SPARE_MARKERS * 4)
    return {n: PRECISION_MARKERS.get(n) or next(spare) for n in sorted(set(names))}


def _eps(value: float) -> str:
    """An EPS figure short enough for a bar's end: 9.4M, 104K, 812."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.savefig(path, bbox_inches="tight", dpi=DPI)
    plt.close(fig)
    return path


def pareto_chart(panels: Sequence[Panel], left_out: Sequence[str], path: Path) -> Path:
    """Speedup against reward error, a point per job (colour: platform, shape: precision),
    the non-dominated jobs joined; one panel for modeled throughput, one for measured."""
    fig, axes = plt.subplots(len(panels), 1, figsize=(WIDTH, 3.3 * len(panels)), dpi=DPI,
                             squeeze=False)
    fig.subplots_adjust(hspace=0.55)
    every = [p for panel in panels for p in panel.points]
    colors = _colors([p.platform for p in every])
    markers = _markers([p.precision for p in every])
    for ax, panel in zip(axes[:, 0], panels):
        for p in panel.points:  # see-through faces: jobs at one spot all show
            ax.scatter(p.speedup, p.error, s=70, facecolor=(*colors[p.platform], 0.3),
                       marker=markers[p.precision], edgecolor=colors[p.platform],
                       linewidth=1.6, zorder=3)
        spots = Counter((round(p.speedup, 6), round(p.error, 6)) for p in panel.points)
        for (x, y), count in spots.items():
            if count > 1:
                ax.annotate(f"×{count}", (x, y), xytext=(7, 5), textcoords="offset points",
                            fontsize=7, color="dimgray")
        front = [panel.points[i] for i in panel.front]
        ax.plot([p.speedup for p in front], [p.error for p in front], color="dimgray",
                linestyle="--", linewidth=1, zorder=2)
        ax.scatter([p.speedup for p in front], [p.error for p in front], s=190,
                   facecolor="none", edgecolor="black", linewidth=0.8, zorder=4)
        kind = ("modeled (eps_platform)" if panel.modeled
                else "measured on this host (eps_host)")
        ax.set_title(f"Speedup, {kind}, vs reward error", fontsize=10)
        ax.set_xlabel(f"speedup over the slowest job ({_eps(panel.slowest.eps)} samples/s), "
                      f"{'modeled' if panel.modeled else 'measured'} (×) →", fontsize=9)
        ax.set_ylabel("reward error vs fp32 (%) ↓", fontsize=9)
        if max(p.speedup for p in panel.points) > 30:
            ax.set_xscale("log")
        top = max(p.error for p in panel.points)
        ax.set_ylim(-0.06 * (top or 5), 1.12 * (top or 5))  # errors are >= 0
        ax.margins(x=0.1)
        ax.grid(alpha=0.3)
        here = {p.platform for p in panel.points}, {p.precision for p in panel.points}
        handles = [plt.Line2D([], [], linestyle="", marker="s", color=c,
                              label=f"platform {name}")
                   for name, c in colors.items() if name in here[0]]
        handles += [plt.Line2D([], [], linestyle="", marker=m, markerfacecolor="none",
                               markeredgecolor="black", label=f"precision {name}")
                    for name, m in markers.items() if name in here[1]]
        handles.append(plt.Line2D([], [], color="dimgray", linestyle="--", marker="o",
                                  markersize=11, markerfacecolor="none",
                                  markeredgecolor="black", markeredgewidth=0.8,
                                  label=f"Pareto front ({len(front)} of {len(panel.points)})"))
        legend_beside(ax, handles)
    if left_out:
        shown = ", ".join(left_out[:3]) + (f" and {len(left_out) - 3} more"
                                           if len(left_out) > 3 else "")
        fig.text(0.0, 0.0, "\n".join(textwrap.wrap(f"not shown: {shown}", 90)), fontsize=7,
                 ha="left", va="top")
    return _save(fig, path)


def setting_label(sweep: Sweep, setting: Sequence[str]) -> str:
    return " · ".join(setting) if setting else "every job"


def _settings(sweep: Sweep, jobs: Sequence[Job]) -> dict[tuple[str, ...], list[Job]]:
    """The jobs by setting (the varying options but the seed), in the sweep's order."""
    groups: dict[tuple[str, ...], list[Job]] = {}
    for job in jobs:
        groups.setdefault(sweep.setting(job), []).append(job)
    return groups


def _phi_lines(sweep: Sweep) -> list[str]:
    """PEARL's Φ(P) for the title: one figure, a few by setting, or their range."""
    rows = sweep.phi_rows()
    if not rows:
        return []
    platforms = ", ".join(sorted({job.option("platform") for job in sweep.jobs}))
    head = f"PEARL Φ(P) over {platforms} (harmonic mean of each platform's best EPS)"
    values = [v for _, v in rows]
    if len({_eps(v) for v in values}) == 1:
        each = f" in each of its {len(values)} settings" if len(values) > 1 else ""
        return [f"{head}: {_eps(values[0])} samples/s{each}"]
    if len(rows) > 3:
        return [f"{head}: {_eps(min(values))}–{_eps(max(values))} samples/s "
                f"over {len(values)} settings"]
    return [head + ":"] + [f"  {label}: {_eps(v)} samples/s" for label, v in rows]


def eps_chart(sweep: Sweep, path: Path) -> Path | None:
    """Modeled EPS (`eps_platform`) beside measured EPS (`eps_host`) for each setting of the
    sweep: the mean over its seeds, whiskers from min to max; PEARL's Φ(P) in the title where
    the sweep spans platforms. None when no job has either."""
    groups = {s: jobs for s, jobs in _settings(sweep, sweep.plotted).items()
              if any(m in j.metrics for j in jobs for m in ("eps_platform", "eps_host"))}
    if not groups:
        return None
    fig, ax = plt.subplots(figsize=(WIDTH, 1.6 + 0.55 * len(groups)), dpi=DPI)
    bars = (("eps_platform", "modeled\n(eps_platform)", "tab:orange", "//"),
            ("eps_host", "measured on this\nhost (eps_host)", "tab:blue", ""))
    for offset, (metric, label, color, hatch) in zip((-0.2, 0.2), bars):
        for row, jobs in enumerate(groups.values()):
            values = [j.metrics[metric] for j in jobs if metric in j.metrics]
            if not values:
                continue
            mean = float(np.mean(values))
            spread = [[mean - min(values)], [max(values) - mean]] if len(values) > 1 else None
            ax.barh(row + offset, mean, height=0.38, color=color, hatch=hatch,
                    edgecolor="black", linewidth=0.4, label=label, xerr=spread,
                    error_kw={"elinewidth": 0.8, "capsize": 2})
            label = None  # once in the legend
            ax.text(max(values) * 1.15, row + offset, _eps(mean), va="center", fontsize=7)
    ax.set_xscale("log")
    ax.set_yticks(range(len(groups)), [setting_label(sweep, s) for s in groups], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("EPS (samples/s, log scale): batch × updates / training seconds", fontsize=9)
    if sweep.settings_keys:
        ax.set_ylabel(" · ".join(sweep.settings_keys), fontsize=9)
    seeds = "mean over seeds, whiskers min–max" if "seed" in sweep.keys else "one job each"
    title = [f"EPS per platform and partitioner: modeled beside measured ({seeds})",
             *_phi_lines(sweep)]
    ax.set_title("\n".join(line for text in title for line in textwrap.wrap(text, 78)),
                 fontsize=9, loc="left")
    ax.margins(x=0.25)
    ax.grid(axis="x", alpha=0.3)
    legend_beside(ax)
    return _save(fig, path)


def _band(curves: Sequence[Sequence[tuple[int, float]]]) -> tuple[np.ndarray, ...]:
    """Steps and the mean, min and max of the curves over the steps they all cover (each one
    interpolated onto the union of their steps)."""
    lo = max(c[0][0] for c in curves)
    hi = min(c[-1][0] for c in curves)
    steps = np.array(sorted({s for c in curves for s, _ in c if lo <= s <= hi}), dtype=float)
    ys = np.array([np.interp(steps, [s for s, _ in c], [v for _, v in c]) for c in curves])
    return steps, ys.mean(axis=0), ys.min(axis=0), ys.max(axis=0)


def curves_chart(sweep: Sweep, path: Path) -> Path | None:
    """`return_mean_100` over env steps, one curve per setting: the mean over its seeds and a
    band from min to max. None when no job logged one."""
    groups = {s: [sweep.curves[j.run.info.run_id] for j in jobs
                  if sweep.curves.get(j.run.info.run_id)]
              for s, jobs in _settings(sweep, sweep.plotted).items()}
    groups = {s: curves for s, curves in groups.items() if curves}
    if not groups:
        return None
    fig, ax = plt.subplots(figsize=(WIDTH, 3.3), dpi=DPI)
    colors = plt.get_cmap("tab10" if len(groups) <= 10 else "tab20").colors
    styles = ("-", "--", "-.", ":")  # curves that coincide still show
    for k, (setting, curves) in enumerate(groups.items()):
        color = colors[k % len(colors)]
        steps, mean, low, high = _band([sorted(c) for c in curves])
        label = f"{setting_label(sweep, setting)} (n={len(curves)})"
        ax.plot(steps, mean, color=color, linewidth=1.5, linestyle=styles[k % len(styles)],
                label=label)
        if len(curves) > 1:
            ax.fill_between(steps, low, high, color=color, alpha=0.18, linewidth=0)
    ax.set_xlabel("environment steps", fontsize=9)
    ax.set_ylabel("return (mean of last 100 episodes)", fontsize=9)
    ax.set_title("Learning curves (training return, measured): mean over seeds, band min–max",
                 fontsize=9, loc="left")
    ax.grid(alpha=0.3)
    legend_beside(ax)
    return _save(fig, path)


def _phase_shares(job: Job) -> dict[str, float]:
    """The job's `phase/<name>_pct`, its update split into the learner's own parts where it
    times them, and `other` (the loop's wall time no phase covers)."""
    shares = {k[len("phase/"):-len("_pct")]: v for k, v in job.metrics.items()
              if k.startswith("phase/") and k.endswith("_pct")}
    parts = {k: shares.pop(k) for k in UPDATE_PARTS if k in shares}
    if parts and "update" in shares:
        shares["update"] = max(shares["update"] - sum(parts.values()), 0.0)
    order = [k for k in LOOP_PHASES if k in shares] + sorted(set(shares) - set(LOOP_PHASES))
    ordered = {}
    for name in order:
        if name == "update" and parts:
            ordered.update({f"update: {k}": v for k, v in parts.items()})
            ordered["update: rest"] = shares[name]
        else:
            ordered[name] = shares[name]
    ordered["other"] = max(100.0 - sum(ordered.values()), 0.0)
    return ordered


def phases_chart(sweep: Sweep, path: Path) -> Path | None:
    """A stacked bar per job: the share of the loop's wall time in each phase. None when no
    job logged phases."""
    rows = [(sweep.label(job), _phase_shares(job)) for job in sweep.plotted
            if any(k.startswith("phase/") and k.endswith("_pct") for k in job.metrics)]
    if not rows:
        return None
    names = list(dict.fromkeys(k for _, shares in rows for k in shares))
    names = [n for n in names if n != "other"] + ["other"]
    cycle = plt.get_cmap("tab20").colors
    colors = {n: cycle[i % len(cycle)] for i, n in enumerate(names)}
    colors["other"] = "lightgray"
    fig, ax = plt.subplots(figsize=(WIDTH, 1.3 + 0.3 * len(rows)), dpi=DPI)
    lefts = np.zeros(len(rows))
    for name in names:
        widths = np.array([shares.get(name, 0.0) for _, shares in rows])
        ax.barh(range(len(rows)), widths, left=lefts, height=0.7, color=colors[name],
                edgecolor="white", linewidth=0.4, label=name)
        lefts += widths
    ax.set_yticks(range(len(rows)), [name for name, _ in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the loop's wall time (%)", fontsize=9)
    ax.set_title("Phase breakdown per job (measured on this host)", fontsize=9, loc="left")
    ax.grid(axis="x", alpha=0.3)
    legend_beside(ax)
    return _save(fig, path)
