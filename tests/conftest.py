import os
from pathlib import Path

import pytest

os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"


@pytest.fixture
def client(tmp_path: Path):
    """A client of the sqlite MLflow store the test's jobs write to."""
    from helpers import new_store, tracking_uri
    from mlflow.tracking import MlflowClient

    new_store(tmp_path)
    return MlflowClient(tracking_uri(tmp_path))
