"""Make a sweep's report from its runs and log it to the parent run under `report/`."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from mlflow.tracking import MlflowClient

from hetrl.report.page import Figure, page
from hetrl.report.pareto import Panel, panels
from hetrl.report.runs import ReportError, Sweep, load_sweep
from hetrl.report.table import summary_table

ARTIFACT_DIR = "report"
HTML = "report.html"


def log_report(client: MlflowClient, parent_id: str, copy_to: Path | None = None) -> list[str]:
    """Read the sweep of parent run `parent_id`, draw its report and log it to that run under
    `report/` (and copy its files to `copy_to`, if given); the artifact paths logged."""
    sweep = load_sweep(client, parent_id)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            files = write_report(sweep, Path(tmp))
            client.log_artifacts(parent_id, tmp, ARTIFACT_DIR)
            if copy_to is not None:
                copy_to.mkdir(parents=True, exist_ok=True)
                for path in files:
                    copy_whole(path, copy_to)
    except OSError as error:  # a full disk, a folder that cannot be written: one line
        raise ReportError(
            f"cannot write {error.filename or 'the report'}: {error.strerror or error}; free "
            "some space or choose another --out (no file was left half-written)") from None
    return [f"{ARTIFACT_DIR}/{f.name}" for f in files]


def copy_whole(path: Path, folder: Path) -> Path:
    """Copy `path` into `folder` under a temporary name, then rename it into place: a disk
    that fills meanwhile leaves the previous file, or none, never a truncated one."""
    part, whole = folder / f".{path.name}.part", folder / path.name
    try:
        shutil.copyfile(path, part)
        os.replace(part, whole)
    except OSError as error:
        part.unlink(missing_ok=True)
        error.filename = str(whole)
        raise
    return whole


def write_report(sweep: Sweep, out: Path) -> list[Path]:
    """The report's PNGs and its HTML page (the PNGs embedded) in `out`; their paths, the
    page last."""
    found, left_out = panels(sweep)
    figures = _figures(sweep, found, left_out, out) if sweep.plotted else []
    table = summary_table(sweep, {p.run_id for panel in found
                                  for p in (panel.points[i] for i in panel.front)})
    parent = sweep.parent
    html = out / HTML
    html.write_text(page(
        f"Sweep report: {parent.info.run_name}",
        [f"parent run {parent.info.run_id}", f"status {parent.info.status}",
         f"experiment {parent.info.experiment_id}",
         f"sweep dir {parent.data.tags.get('sweep_dir', '?')}"],
        f"python -m hetrl -m {parent.data.tags.get('overrides', '')}",
        _notes(sweep), figures, table))
    return [f.png for f in figures] + [html]


def _figures(sweep: Sweep, found: list[Panel], left_out: list[str], out: Path) -> list[Figure]:
    """The pictures of the finished jobs (`sweep.plotted`) as PNGs in `out`: charts, and
    matplotlib with it, is imported only for a sweep that has one (a stopped sweep's report
    is its table)."""
    from hetrl.report import charts

    figures = []
    if found:
        modeled = " and ".join(("modeled" if p.modeled else "measured") for p in found)
        figures.append(Figure(
            "Pareto front: speedup vs reward error",
            charts.pareto_chart(found, left_out, out / "pareto.png"),
            f"One point per finished job (panels: {modeled}); colour: platform, shape: "
            "precision. The ringed jobs, joined by the dashed line, are the non-dominated "
            "ones: no other job is as fast and as exact and better in one of the two. "
            "A job on a modeled platform is placed by its modeled eps_platform, a job on this "
            "host by its measured eps_host, never on one axis. The speedup is over the "
            "panel's slowest job, from EPS: a job's own speedup_vs_<baseline> is over a "
            "baseline plan of its platform and precision and does not compare across jobs. "
            "fp32 jobs without reward_error_pct are the reference of the others: at 0 %. "
            + " ".join(f"The {'modeled' if p.modeled else 'measured'} speedups are over "
                       f"{p.slowest.name} ({p.slowest.eps:.4g} samples/s)." for p in found)
            + (f" Not shown: {'; '.join(left_out)}." if left_out else "")))
    for title, draw, name, caption in (
            ("EPS per platform and partitioner", charts.eps_chart, "eps.png",
             "EPS: samples trained per second. Modeled (eps_platform, hatched): "
             "batch / the modeled step time of the job's plan on its platform. Measured "
             "(eps_host): batch × updates / training seconds of the loop as it ran on this "
             "host, whatever the platform modeled. PEARL's Φ(P) (in the title where the sweep spans platforms) is the "
             "harmonic mean over platforms of each one's best EPS (portability.csv): modeled "
             "on a modeled platform, measured on the host, as the sweep logged it."),
            ("Learning curves", charts.curves_chart, "learning_curves.png",
             "return_mean_100 over environment steps for each setting of the varying options: "
             "the mean over its seeds and a band from their min to their max, over the "
             "steps every seed logged."),
            ("Phase breakdown", charts.phases_chart, "phases.png",
             "Measured share of each job's loop wall time per phase (phase/*_pct); "
             "'update: …' are the learner's own parts of its update, 'other' is the time no "
             "phase covers.")):
        png = draw(sweep, out / name)
        if png is not None:
            if draw is charts.eps_chart and sweep.phis:
                caption += " Φ(P) by setting: " + "; ".join(
                    f"{label}: {value:.4g} samples/s" for label, value in sweep.phi_rows()) + "."
            figures.append(Figure(title, png, caption))
    return figures


def _notes(sweep: Sweep) -> list[str]:
    """What the reader must know before reading the pictures."""
    counts = {s: sum(j.status == s for j in sweep.jobs)
              for s in ("FINISHED", "FAILED", "KILLED", "RUNNING")}
    unrun = {what: int(sweep.parent.data.metrics.get(key, 0)) for what, key in (
        ("rejected before they ran", "jobs_rejected"), ("never started", "jobs_not_started"))}
    notes = [f"{len(sweep.jobs)} jobs ran: {counts['FINISHED']} finished, {counts['FAILED']} "
             f"failed, {counts['KILLED']} killed"
             + (f", {counts['RUNNING']} still running" if counts["RUNNING"] else "")
             + "".join(f"; {n} {what} (summary.md lists them)" for what, n in unrun.items() if n)
             + "."]
    unplotted = [sweep.label(j) for j in sweep.jobs if not j.finished]
    if unplotted:
        notes.append("Jobs that did not finish (FAILED, KILLED or RUNNING) are in the table "
                     "only, not in the plots: " + ", ".join(unplotted) + ".")
    notes.append("Modeled figures (eps_platform, speedups on a modeled platform) come from "
                 "the platform's analytical model, never from a measurement; measured ones "
                 "(eps_host, phases, returns) are of the training as it ran on this host.")
    if sweep.keys:
        notes.append("Options that vary across the jobs: " + ", ".join(sweep.keys) + ".")
    if any(job.video for job in sweep.jobs):
        notes.append("The table's video column links each setting's episode videos (one per "
                     "job that has one: python -m hetrl.evaluate <job dir> video=true logs it) "
                     "on the job's run page in the MLflow UI (a local store's served by mlflow "
                     "ui --backend-store-uri <store>).")
    return notes
