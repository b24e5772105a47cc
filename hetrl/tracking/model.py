"""A run's policy as an MLflow model: a pyfunc over `hetrl.load`, with its signature.

    mlflow.pyfunc.load_model("runs:/<run id>/policy").predict(observations)   # -> actions
    mlflow models serve -m runs:/<run id>/policy --env-manager local

Its `requirements.txt` pins hetrl's own runtime requirements (torch, numpy, gymnasium, ...) to
the versions the job ran with (MLflow warns where the model is loaded with others); hetrl
itself is on no package index and not listed: the model runs where hetrl is installed
(`--env-manager local`). The model's one artifact is the job's `policy.pt`; its
`model_config` says which weights (`weights`: the final ones, or the kept best ones) and which
precision (`precision`: fp32 or the actors', as they acted) the policy runs in; its metadata
names the job and the actors' precision.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import tempfile
import warnings
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any, Iterator

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # a bar per copied file

import mlflow.pyfunc  # noqa: E402
import numpy as np  # noqa: E402
from mlflow.models.signature import ModelSignature  # noqa: E402
from mlflow.types.schema import Schema, TensorSpec  # noqa: E402
from packaging.requirements import Requirement  # noqa: E402
from packaging.version import Version  # noqa: E402

from hetrl.tracking.base import Tracker  # noqa: E402

MODEL = "policy"
"""The run's artifact folder of the final policy's model (`policy_best`: the kept one)."""


class PolicyModel(mlflow.pyfunc.PythonModel):
    """Observations (a batch, as the env gives one) in, the greedy actions out."""

    def load_context(self, context: Any) -> None:
        from hetrl import checkpoint
        from hetrl.loading import from_state

        config = context.model_config or {}
        state = checkpoint.load_policy(Path(context.artifacts["policy"]))
        self.agent = from_state(state, precision=config.get("precision", "fp32"),
                                weights=config.get("weights", "final"))

    # no type hints here: MLflow reads predict's hints as an input schema, and warns at Any
    def predict(self, context, model_input, params=None):  # noqa: ANN001, ANN201
        return self.agent.act(np.asarray(model_input), deterministic=True)


@contextmanager
def _quiet() -> Iterator[None]:
    """MLflow's advice on saving a pyfunc (type hints, an input example, cloudpickle), which
    the job's terminal would print at every job's end."""
    logger = logging.getLogger("mlflow.pyfunc")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            yield
    finally:
        logger.setLevel(level)


@cache
def requirements(distribution: str = "hetrl") -> tuple[str, ...]:
    """`distribution`'s runtime requirements (not its extras'), each pinned to its installed
    version without a local label (torch 2.13.0+cpu: torch==2.13.0, as MLflow pins), one not
    installed as declared; none where `distribution` is not installed (a source tree)."""
    try:
        declared = importlib.metadata.requires(distribution) or []
    except importlib.metadata.PackageNotFoundError:
        return ()
    pinned = []
    for text in declared:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
        try:
            version = Version(importlib.metadata.version(req.name)).public
        except importlib.metadata.PackageNotFoundError:
            pinned.append(text)
            continue
        pinned.append(f"{req.name}{extras}=={version}")
    return tuple(pinned)


def signature(obs_space: Any, act_space: Any) -> ModelSignature:
    """A batch of observations in, a batch of actions out (shapes and dtypes of the spaces)."""
    act_shape = tuple(act_space.shape or ())
    return ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(obs_space.dtype), (-1, *obs_space.shape))]),
        outputs=Schema([TensorSpec(np.dtype(act_space.dtype), (-1, *act_shape))]))


def log_policy_model(tracker: Tracker, policy_file: Path, obs_space: Any, act_space: Any,
                     metadata: dict[str, str], weights: str = "final",
                     precision: str = "fp32") -> str:
    """Save the pyfunc model of `policy_file` and log it into the run's artifacts (`policy`,
    or `policy_best` for the kept weights); returns that folder's name."""
    folder = MODEL if weights == "final" else f"{MODEL}_{weights}"
    with tempfile.TemporaryDirectory() as tmp, _quiet():
        path = Path(tmp) / folder
        mlflow.pyfunc.save_model(
            path, python_model=PolicyModel(), artifacts={"policy": str(policy_file)},
            signature=signature(obs_space, act_space),
            model_config={"weights": weights, "precision": precision},
            metadata={**metadata, "precision": precision},
            # named, not inferred: MLflow's inference loads the model in a subprocess
            pip_requirements=list(requirements()))
        for file in sorted(p for p in path.rglob("*") if p.is_file()):
            parent = file.parent.relative_to(path.parent).as_posix()
            tracker.log_artifact(file, parent)
    return folder
