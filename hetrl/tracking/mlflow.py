"""MLflow tracking through an explicit client: one job is one run, with MLflow's system tags
(user, source, git commit, description) and system metrics (CPU, memory, disk, network)."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Mapping, Sequence

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# a tracking server's client prints "View run ... at: <url>" when a run ends: hetrl's start
# line and end summary name the run already
os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
# a tracking server's client retries a failed request 7 times, backing off 2 s doubling (~4
# min of a refused write), and waits 120 s for each answer: a server gone between the store's
# look (store_watch) and a write would be named minutes late. Two retries, 1 s doubling, ride
# out a blip (a 503, a worker restarting) and fail a refused write in 2-4 s; 30 s an answer is
# above the 20 s a healthy server's sqlite session waits for a busy lock (MLflow's
# busy_timeout), and names a host that vanished unanswering in ~90 s rather than ~20 min
for _name, _value in (("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2"),
                      ("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1"),
                      ("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")):
    os.environ.setdefault(_name, _value)

from mlflow.entities import Metric, Param, Run, RunTag  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME  # noqa: E402
from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH  # noqa: E402

from hetrl.faults import Fault  # noqa: E402
from hetrl.tracking.store_watch import StoreWatch, why_no_answer  # noqa: E402
from hetrl.stopping import deferred_stops  # noqa: E402
from hetrl.tracking.base import REFERENCE_TAG  # noqa: E402
from hetrl.tracking.empty_store import create_store  # noqa: E402
from hetrl.tracking.metadata import system_tags  # noqa: E402
from hetrl.tracking.sqlite import store_uri, wal_mode  # noqa: E402

_BATCH = 100  # MLflow's limit of params per log_batch call
EXPERIMENT_KIND = "mlflow.experimentKind"
"""MLflow 3's experiment type: `custom_model_development` opens an experiment on its runs
table, not on the GenAI (traces) pages, in the UIs before 3.17 (3.17 goes by its own GenAI /
Model training switch: `view_route` sets it)."""
UI = "http://127.0.0.1:5000"  # where `mlflow ui` serves by default
VIEW_TAG = "mlflow.sharedViewState."
"""MLflow 3's UI keeps an experiment's saved views of its runs table as experiment tags named
with this prefix and the view's id: the runs page lists them in its Views menu, and
`?viewStateShareKey=<id>` opens one."""
VIEW_ID = "hetrl-compare"
VIEW_NAME = "hetrl: compare runs"

log = logging.getLogger("hetrl")


def client_for(uri: str, experiment: str,
               view_columns: Sequence[str] = ()) -> tuple[MlflowClient, str]:
    """A client for `uri` and the id of `experiment`, created on first use; with
    `view_columns`, the experiment has the runs table's saved view VIEW_NAME showing them.

    A relative sqlite path is relative to the working directory; its folder is created,
    and artifacts go to `mlartifacts/` beside the database. A folder that cannot be written
    is named at once (MLflow would retry for ~100 s, then say "unable to open database file").
    A sqlite store takes many writers (a parallel sweep's jobs): it is in WAL mode, each
    connection waits up to sqlite.SQLITE_BUSY_S for a lock (`store_uri`), and the schema and the
    experiment are created under a file lock beside the database (MLflow's own store creates
    its tables unguarded: two jobs starting together on a new store lost one of them).
    An http(s) store (a tracking server: python -m hetrl.tracking.server) must answer first
    (`check_server`). A stop by signal waits until the store and experiment exist
    (`deferred_stops`): one cut in two would fail every later job.
    """
    if uri.startswith(("http://", "https://")):
        check_server(uri, experiment)
    if not uri.startswith("sqlite:///"):
        with deferred_stops():  # a database's schema is created or migrated whole
            client = MlflowClient(tracking_uri=uri)
            return client, _experiment_id(client, experiment, None, view_columns)
    db = Path(uri.removeprefix("sqlite:///").split("?", 1)[0])
    _check_writable(db, uri)
    artifact_location = (db.parent / "mlartifacts").resolve().as_uri()
    with deferred_stops(), _file_lock(db.with_name(db.name + ".lock")):
        create_store(db)
        wal_mode(db)
        client = MlflowClient(tracking_uri=store_uri(uri))
        return client, _experiment_id(client, experiment, artifact_location, view_columns)


SERVER_WAIT_S = 3.0  # how long a tracking server that does not answer is retried
_SILENT: set[str] = set()  # servers that did not answer in this process: not waited for again


def all_runs(client: MlflowClient, experiment_ids: list[str], filter_string: str = "",
             order_by: list[str] | None = None) -> list[Run]:
    """Every run a search finds, page by page (a search returns one page)."""
    found, token = [], None
    while True:
        page = client.search_runs(experiment_ids, filter_string=filter_string,
                                  order_by=order_by, page_token=token)
        found.extend(page)
        if not (token := page.token):
            return found


def sweep_children(client: MlflowClient, parent_id: str) -> tuple[list[Run], list[Run]]:
    """A sweep's child runs, oldest first: its jobs, and the reference runs its jobs trained
    (`REFERENCE_TAG`)."""
    parent = client.get_run(parent_id)
    found = all_runs(client, [parent.info.experiment_id],
                     f"tags.{MLFLOW_PARENT_RUN_ID} = '{parent_id}'", ["attributes.start_time ASC"])
    jobs = [run for run in found if REFERENCE_TAG not in run.data.tags]
    return jobs, [run for run in found if REFERENCE_TAG in run.data.tags]


def check_server(uri: str, experiment: str = "Default") -> None:
    """Raise a Fault naming `uri` unless an MLflow tracking server answers there within
    SERVER_WAIT_S seconds (MLflow's client retries a refused connection for ~4 minutes
    before it says so), once per process (a sweep's next job asks again, and fails at once).
    It is asked for `experiment` by name, with the client's credentials
    (MLFLOW_TRACKING_USERNAME, ...): 200, or 404 with MLflow's error code, is an answer."""
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    start = "start one with python -m hetrl.tracking.server up (it prints the tracking.uri to use)"
    deadline = time.monotonic() + (0 if uri in _SILENT else SERVER_WAIT_S)
    while True:
        try:
            response = http_request(get_default_host_creds(uri),
                                    "/api/2.0/mlflow/experiments/get-by-name", "GET",
                                    params={"experiment_name": experiment}, max_retries=0,
                                    timeout=SERVER_WAIT_S)
            break
        except Exception as error:  # noqa: BLE001 - refused, unknown host, no answer: named
            if time.monotonic() < deadline:
                time.sleep(1.0)
                continue
            _SILENT.add(uri)
            why = why_no_answer(error, SERVER_WAIT_S)
            raise Fault(f"tracking.uri={uri} does not answer ({why}): is the tracking "
                        f"server up, at that host and port? {start}, or track to a local "
                        "store: tracking.uri=sqlite:///runs/mlflow.db") from None
    if response.status_code == 200 or (
            response.status_code == 404 and "RESOURCE_DOES_NOT_EXIST" in response.text):
        return
    text = " ".join(response.text.split())[:300]
    if response.status_code == 403 and "host header" in text.lower():
        from urllib.parse import urlsplit

        raise Fault(f"tracking.uri={uri}: the server refuses the host name it was reached by "
                    f"({text!r}): use the tracking.uri that python -m hetrl.tracking.server up printed, "
                    f"or start it with --allowed-hosts {urlsplit(uri).netloc}")
    raise Fault(f"tracking.uri={uri} answered HTTP {response.status_code}, not as an MLflow "
                f"tracking server: {text!r}; is that the port of one? {start}")


class _file_lock:
    """An exclusive flock on `path` (POSIX; elsewhere no lock)."""

    def __init__(self, path: Path) -> None:
        self.path, self.file = path, None

    def __enter__(self) -> None:
        try:
            import fcntl
        except ImportError:  # Windows
            return
        self.file = open(self.path, "a+b")  # noqa: SIM115 - closed in __exit__
        fcntl.flock(self.file, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        if self.file is not None:
            self.file.close()  # releases the lock


def _experiment_id(client: MlflowClient, experiment: str, artifact_location: str | None,
                   view_columns: Sequence[str]) -> str:
    """The experiment's id, created if it does not exist; another process creating it at the
    same moment (a tracking server's other clients) is not an error: its id is taken."""
    from mlflow.exceptions import MlflowException

    for attempt in range(5):
        found = client.get_experiment_by_name(experiment)
        if found is not None:
            for key, value in _tags_to_set(found.tags, view_columns).items():
                client.set_experiment_tag(found.experiment_id, key, value)
            return found.experiment_id
        try:
            return client.create_experiment(experiment, artifact_location=artifact_location,
                                            tags=_tags_to_set({}, view_columns))
        except MlflowException as error:
            if "already exists" not in str(error).lower() and "unique" not in str(error).lower():
                raise
            time.sleep(0.1 * (attempt + 1))  # created by another job meanwhile: read it
    raise RuntimeError(f"experiment {experiment!r} neither found nor created")


def _tags_to_set(tags: Mapping[str, str], view_columns: Sequence[str]) -> dict[str, str]:
    """The experiment tags hetrl keeps that `tags` lack: MLflow's experiment kind (where
    unset) and the saved view of `view_columns` (where its columns differ: the view is
    hetrl's, and a person's own view is saved under another name)."""
    wanted = {} if EXPERIMENT_KIND in tags else {EXPERIMENT_KIND: "custom_model_development"}
    columns = [_column_key(column) for column in view_columns]
    if columns and _view_columns(tags.get(VIEW_TAG + VIEW_ID)) != columns:
        now = int(time.time() * 1000)
        state = json.dumps({"selectedColumns": columns})
        wanted[VIEW_TAG + VIEW_ID] = json.dumps(
            {"name": VIEW_NAME, "createdAt": now, "updatedAt": now, "state": state})
    return wanted


def _column_key(column: str) -> str:
    """The UI's key of a runs-table column: `metrics.eps_host` is metrics.`eps_host`."""
    kind, _, name = column.partition(".")  # a column without a kind: the job rejects it
    return f"{kind}.`{name}`"


def _view_columns(value: str | None) -> list[str] | None:
    """The columns of a saved view (the UI's envelope: name, times and the state as JSON);
    None for no view, or one hetrl does not read (the UI may compress the state)."""
    try:
        return json.loads(json.loads(value)["state"])["selectedColumns"]
    except (TypeError, ValueError, KeyError):
        return None


def view_route(experiment_id: str) -> str:
    """The UI's route to the experiment's runs table in the saved view VIEW_NAME, among the
    model-training pages (MLflow 3.17 opens an experiment on its GenAI pages unless told)."""
    return (f"/experiments/{experiment_id}/runs?workflowType=machine_learning"
            f"&viewStateShareKey={VIEW_ID}")


def ui_url(uri: str, route: str) -> str:
    """Where the UI shows `route` (a run's `/experiments/<id>/runs/<run id>`, `view_route`),
    and the command that serves it for a local store."""
    link = ui_link(uri, route)
    served = uri.startswith(("http://", "https://"))
    return link if served else f"{link}  (serve it: mlflow ui --backend-store-uri {uri})"


def ui_link(uri: str, route: str) -> str:
    """The UI's address of `route`: the store's server, or where `mlflow ui` serves one."""
    base = uri.rstrip("/") if uri.startswith(("http://", "https://")) else UI
    return f"{base}/#{route}"


def _check_writable(db: Path, uri: str) -> None:
    """Create the database's folder and write a file there (root ignores permission bits,
    a read-only mount does not), or raise a Fault naming the folder."""
    folder = db.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
        if db.exists():
            with db.open("r+b"):
                pass
    except OSError as error:
        where = db if db.exists() and folder.is_dir() else folder
        raise Fault(
            f"tracking.uri={uri}: cannot write to {where} ({error.strerror or error}); make it "
            "writable, or choose a writable place: tracking.uri=sqlite:///<folder>/mlflow.db "
            "(or tracking=none)"
        ) from error


class MlflowTracker:
    def __init__(self, uri: str, experiment: str, parent_run_id: str | None,
                 system_metrics_s: float, view_columns: Sequence[str]) -> None:
        self.uri = uri
        self.client, self.experiment_id = client_for(uri, experiment, view_columns)
        self.parent_run_id = parent_run_id
        self.system_metrics_s = system_metrics_s
        self.run_id: str | None = None
        self._monitor = None
        self.logged_to = -1  # metrics at steps up to this one are in the run already
        self.resumed = False
        self.store = StoreWatch(uri)

    def start(self, name: str, tags: Mapping[str, str], run_id: str | None = None) -> None:
        if run_id is not None:  # resume: the same run goes on
            self.client.update_run(run_id, status="RUNNING")
            self.run_id, self.resumed = run_id, True
            self.logged_to = self._last_step()
        else:
            tags = {MLFLOW_RUN_NAME: name, **system_tags(name), **tags}
            if self.parent_run_id:
                tags[MLFLOW_PARENT_RUN_ID] = self.parent_run_id
            run = self.client.create_run(self.experiment_id, run_name=name, tags=dict(tags))
            self.run_id = run.info.run_id
        self.store.run_id = self.run_id
        self._start_system_metrics(resume=run_id is not None)

    def _start_system_metrics(self, resume: bool) -> None:
        """MLflow's own monitor (psutil) logs `system/*` every `system_metrics_s` seconds
        into this run; 0 turns it off."""
        if not self.system_metrics_s:
            return
        logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)
        try:
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

            self._monitor = SystemMetricsMonitor(
                self.run_id, sampling_interval=self.system_metrics_s, resume_logging=resume,
                tracking_uri=store_uri(self.uri))
        except Exception as error:  # noqa: BLE001 - psutil missing: train without them
            log.warning("no system metrics: %s", error)
            return
        self._monitor.start()

    def where(self) -> str:
        """The run in the UI (the start line and the end summary print it)."""
        route = f"/experiments/{self.experiment_id}/runs/{self.run_id}"
        return f"MLflow run {self.run_id}: {ui_url(self.uri, route)}"

    def log_params(self, params: Mapping[str, object]) -> None:
        items = [Param(k, str(v)[:MAX_PARAM_VAL_LENGTH]) for k, v in params.items()]
        for i in range(0, len(items), _BATCH):
            self.client.log_batch(self.run_id, params=items[i : i + _BATCH])

    def set_tags(self, tags: Mapping[str, str]) -> None:
        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def find_metric(self, tags: Mapping[str, str], metric: str) -> float | None:
        found = " and ".join(f"tags.{k} = '{v}'" for k, v in tags.items())
        runs = self.client.search_runs(
            [self.experiment_id], filter_string=f"{found} and attributes.status = 'FINISHED'",
            order_by=["attributes.start_time DESC"], max_results=1,
        )
        return runs[0].data.metrics.get(metric) if runs else None

    def _last_step(self) -> int:
        """The last step the run has metrics at: a job resumed from a checkpoint older than
        that (killed after it) repeats those steps, and logs each of them only once (the
        values are the same: a resumed job goes on bit for bit)."""
        keys = self.client.get_run(self.run_id).data.metrics
        return max((m.step for key in keys for m in self.client.get_metric_history(
            self.run_id, key)), default=-1)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.store.check()  # once a log interval: a store that vanished stops the job
        if step <= self.logged_to:
            return
        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step) for k, v in metrics.items()]
        with self.store.writing():
            for i in range(0, len(items), 1000):
                self.client.log_batch(self.run_id, metrics=items[i : i + 1000])

    def log_artifact(self, path: Path, folder: str | None = None) -> None:
        if not self.store.lost:
            with self.store.writing():
                self.client.log_artifact(self.run_id, str(path), folder)

    def log_text(self, text: str, name: str) -> None:
        if not self.store.lost:
            with self.store.writing():
                self.client.log_text(self.run_id, text, name)

    def end(self, status: str) -> None:
        """Close the run; one that finishes after a resume drops the error.txt of the failure
        it resumed from. A FINISHED end over a store that vanished raises StoreLost."""
        if self._monitor is not None:
            self._monitor.finish()
            self._monitor = None
        if self.store.lost:
            return  # nothing left to close
        if status == "FINISHED":
            self.store.check()
            if self.resumed:
                self._drop_artifact("error.txt")
        self.client.set_terminated(self.run_id, status=status)

    def _drop_artifact(self, name: str) -> None:
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

        uri = self.client.get_run(self.run_id).info.artifact_uri
        try:
            if any(f.path == name for f in self.client.list_artifacts(self.run_id)):
                get_artifact_repository(uri).delete_artifacts(name)
        except Exception as error:  # noqa: BLE001 - a store that cannot delete: say so
            log.warning("the run finished, but its old %s (of the failure it resumed from) "
                        "stays in %s: %s", name, uri, error)
