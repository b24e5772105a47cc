import gc
import os
from pathlib import Path

import pytest

os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"


def pytest_collection_finish(session: pytest.Session) -> None:
    """The heap that the imports and the collection made, frozen: Python's cyclic GC never
    scans its objects again, where each full collection of a test process rescanned them all
    (a tenth of the CPU of config-heavy tests: the registry's pairing)."""
    gc.collect()
    gc.freeze()


@pytest.fixture
def client(tmp_path: Path):
    """A client of the sqlite MLflow store the test's jobs write to."""
    from helpers import new_store, tracking_uri
    from mlflow.tracking import MlflowClient

    new_store(tmp_path)
    return MlflowClient(tracking_uri(tmp_path))
