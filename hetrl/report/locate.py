"""Find a sweep's parent run from what a user has at hand: its run id or its sweep folder."""

from __future__ import annotations

from pathlib import Path

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from hetrl.report.runs import ReportError
from hetrl.tracking.mlflow import all_runs


def open_store(uri: str) -> MlflowClient:
    """A client of the tracking store at `uri`; a sqlite store must exist (MLflow would make
    an empty one), a tracking server must answer (MLflow's client would retry for minutes)."""
    from hetrl.faults import Fault
    from hetrl.tracking.mlflow import check_server, store_uri

    if uri.startswith(("http://", "https://")):
        try:
            check_server(uri)
        except Fault as error:
            raise ReportError(str(error).replace("tracking.uri=", "--tracking-uri ", 1)) from None
    if uri.startswith("sqlite:///"):
        db = Path(uri.removeprefix("sqlite:///").split("?", 1)[0])
        if not db.is_file():
            raise ReportError(f"no MLflow store at {db} (tracking uri {uri}): pass the one "
                              "the sweep logged to with --tracking-uri")
    return MlflowClient(tracking_uri=store_uri(uri))


def find_parent(client: MlflowClient, target: str) -> str:
    """The id of the sweep parent run that `target` names: a run id, or the sweep's folder
    (the parent's `sweep_dir` tag, as given or relative to where the sweep was started)."""
    if not _looks_like_path(target):
        try:
            run = client.get_run(target)
        except MlflowException:
            run = None
        if run is not None:
            if run.data.tags.get("sweep") != "true":
                raise ReportError(f"run {target} is not a sweep's parent run (it has no tag "
                                  "sweep=true): pass a sweep's folder or its parent run id")
            return run.info.run_id
    matches = _parents_of(client, Path(target))
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ReportError(f"{target} matches the sweep_dir of several parent runs "
                          f"({', '.join(matches)}): pass one of their run ids")
    raise ReportError(f"{target!r} is neither a sweep's parent run id nor the sweep_dir of "
                      "one in this store (the parent's tag sweep_dir, e.g. "
                      "runs/multirun/<date>/<time>)")


def _looks_like_path(target: str) -> bool:
    return "/" in target or Path(target).exists()


def _parents_of(client: MlflowClient, folder: Path) -> list[str]:
    """The parent runs whose `sweep_dir` is `folder`: the same string, the same folder, or a
    relative `sweep_dir` that `folder` resolved ends with."""
    resolved = folder.resolve()
    exact, tail = [], []
    experiments = [e.experiment_id for e in client.search_experiments()]
    parents = all_runs(client, experiments, "tags.sweep = 'true'",
                       ["attributes.start_time DESC"]) if experiments else []
    for run in parents:
        tag = run.data.tags.get("sweep_dir", "")
        if not tag:
            continue
        path = Path(tag)
        if tag == str(folder) or path.resolve() == resolved:
            exact.append(run.info.run_id)
        elif not path.is_absolute() and resolved.parts[-len(path.parts):] == path.parts:
            tail.append(run.info.run_id)
    return exact or tail
