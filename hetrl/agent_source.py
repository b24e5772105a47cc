"""Where a run's policy is read from: a job folder, a policy or checkpoint file, an MLflow run.

Every job writes `policy.pt` into its folder and logs it to its run (`hetrl.experiment`); a
folder or run from before that has only its `checkpoint.pt`, whose config and weights are
read instead.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from hetrl import checkpoint
from hetrl.config.errors import ConfigError

DEFAULT_URI = "sqlite:///runs/mlflow.db"
_RUN_ID = re.compile(r"^[0-9a-f]{32}$")


def policy_state(source: str | Path, tracking_uri: str | None = None) -> dict[str, Any]:
    """The policy file's contents (config, choices, weights, run id) of `source`."""
    text = str(source)
    if text.startswith("runs:/") or (_RUN_ID.match(text) and not Path(text).exists()):
        return _from_run(text.removeprefix("runs:/").strip("/").split("/")[0], tracking_uri)
    path = Path(text)
    if path.is_dir():
        if (path / checkpoint.POLICY).is_file():
            return checkpoint.load_policy(path / checkpoint.POLICY)
        if (path / checkpoint.FILENAME).is_file():
            return from_checkpoint(checkpoint.load(path, "source"))
        raise ConfigError(
            f"source={text!r} is invalid: a job folder holds {checkpoint.POLICY} (or "
            f"{checkpoint.FILENAME}), and {text} has neither; valid values are a job's output "
            "folder (runs/<date>/<time>), a policy.pt or checkpoint.pt file, or an MLflow run "
            "(runs:/<run id>)")
    if path.is_file():
        if path.name == checkpoint.FILENAME:
            return from_checkpoint(checkpoint.load(path.parent, "source"))
        return checkpoint.load_policy(path)
    raise ConfigError(
        f"source={text!r} is invalid: no such file or folder; valid values are a job's output "
        "folder (runs/<date>/<time>), a policy.pt or checkpoint.pt file, or an MLflow run "
        "(runs:/<run id>, or its 32-digit id)")


def from_checkpoint(saved: dict[str, Any]) -> dict[str, Any]:
    """A policy file's contents from a job's whole checkpoint (no kept policy in it)."""
    config = OmegaConf.to_container(OmegaConf.create(saved["config"]), resolve=True,
                                    enum_to_str=True)
    return {"config": config, "choices": saved["choices"], "run_id": saved.get("run_id"),
            "modules": saved["learner"]["modules"], "best": None,
            "step": saved["loop"].step}


def _from_run(run_id: str, tracking_uri: str | None) -> dict[str, Any]:
    """The policy file logged to an MLflow run (downloaded into a temporary folder)."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_URI
    client = MlflowClient(uri)
    try:
        client.get_run(run_id)
    except MlflowException as error:
        raise ConfigError(f"source=runs:/{run_id} is invalid: no such run in the MLflow store "
                          f"{uri} ({error.error_code}); pass the store the run is in as "
                          "tracking_uri (or MLFLOW_TRACKING_URI)") from None
    names = {f.path for f in client.list_artifacts(run_id)}
    name = next((n for n in (checkpoint.POLICY, checkpoint.FILENAME) if n in names), None)
    if name is None:
        raise ConfigError(f"source=runs:/{run_id} is invalid: the run has no {checkpoint.POLICY}"
                          f" or {checkpoint.FILENAME} artifact (it has {sorted(names)}); valid "
                          "values are runs of finished hetrl jobs")
    with tempfile.TemporaryDirectory() as folder:
        local = Path(client.download_artifacts(run_id, name, folder))
        if name == checkpoint.POLICY:
            return {**checkpoint.load_policy(local), "tracking_uri": uri}
        return {**from_checkpoint(checkpoint.load(local.parent, "source")), "tracking_uri": uri}
