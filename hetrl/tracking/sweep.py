"""A Hydra callback that makes a multirun one MLflow parent run with each job a child.

The parent gets a summary table (CSV and markdown) of every child: its choices, final
metrics and status, rewritten after each job so that a sweep cut short still has one.
Hydra skips `on_multirun_end` when a job failed, so the parent is also closed at exit.
"""

from __future__ import annotations

import atexit
import csv
import io
import os
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

PARENT_ENV = "HETRL_PARENT_RUN_ID"  # read by the jobs' tracking config
CHOICE_TAGS = ("algo", "env", "platform", "precision", "partitioner", "scheduler", "replay",
               "seed")
SUMMARY_METRICS = ("return_mean_100", "eval/return_mean", "reward_error_pct", "sps", "eps_host",
                   "eps_platform", "phi_d", "updates")


class MlflowSweep(Callback):
    def __init__(self, uri: str | None, experiment: str | None) -> None:
        self.uri, self.experiment = uri, experiment
        self.client = None
        self.parent_id: str | None = None
        self.keys: list[str] = []  # config keys set on the command line: columns of the summary

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if self.uri is None:  # tracking=none
            return
        from mlflow.entities import Param

        from hetrl.tracking.mlflow import client_for

        self.client, experiment_id = client_for(self.uri, self.experiment)
        sweep_dir = str(config.hydra.sweep.dir)
        overrides = list(config.hydra.overrides.task)
        run = self.client.create_run(
            experiment_id,
            run_name=sweep_name(overrides, Path(sweep_dir).name),
            tags={"sweep": "true", "sweep_dir": sweep_dir, "overrides": " ".join(overrides),
                  "mlflow.note.content": f"```\npython -m hetrl -m {' '.join(overrides)}\n```"},
        )
        self.parent_id = run.info.run_id
        # the last of a repeated key wins, as in Hydra
        params = dict(o.lstrip("+~").split("=", 1) for o in overrides if "=" in o)
        self.client.log_batch(self.parent_id, params=[Param(k, v[:6000])
                                                      for k, v in params.items()])
        keys = [o.split("=", 1)[0].lstrip("+~") for o in config.hydra.overrides.task if "=" in o]
        self.keys = [k for k in keys if k not in CHOICE_TAGS and k != "tracking.uri"
                     and not k.startswith("hydra.")]
        os.environ[PARENT_ENV] = self.parent_id
        atexit.register(self._close)

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

    def _write_summary(self) -> list:
        children = self._children()
        header = ["run", *CHOICE_TAGS, *self.keys, "status", *SUMMARY_METRICS]
        rows = [
            [run.info.run_name, *(run.data.tags.get(t, "") for t in CHOICE_TAGS),
             *(run.data.params.get(k, "") for k in self.keys), run.info.status,
             *(_fmt(run.data.metrics.get(m)) for m in SUMMARY_METRICS)]
            for run in children
        ]
        counts = {s: sum(r.info.status == s for r in children) for s in ("FINISHED", "FAILED")}
        text = io.StringIO()
        csv.writer(text).writerows([header, *rows])
        self.client.log_text(self.parent_id, text.getvalue(), "summary.csv")
        table = [f"| {' | '.join(header)} |", f"|{'---|' * len(header)}"]
        table += [f"| {' | '.join(row)} |" for row in rows]
        counted = f"{len(children)} jobs: {counts['FINISHED']} finished, {counts['FAILED']} failed"
        self.client.log_text(self.parent_id, "\n".join([counted, "", *table, ""]), "summary.md")
        for key, value in (("jobs", len(children)), ("jobs_finished", counts["FINISHED"]),
                           ("jobs_failed", counts["FAILED"])):
            self.client.log_metric(self.parent_id, key, value)
        self._log_portability(children)
        self._log_seed_reward_errors(children)
        return children

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
        children = self._write_summary()
        statuses = {run.info.status for run in children}
        status = "FAILED" if "FAILED" in statuses else "KILLED" if "KILLED" in statuses else "FINISHED"
        self.client.set_terminated(self.parent_id, status=status)
        os.environ.pop(PARENT_ENV, None)
        self.parent_id = None


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


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"
