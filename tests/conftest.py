import gc
import logging
import os
from pathlib import Path
from typing import Iterator

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


@pytest.fixture
def job_log(tmp_path: Path) -> Iterator[Path]:
    """The job's log file, as Hydra's (the root logger's file handler), for the test only:
    the workers log beside it (workers/), and a test that fails leaves it to no other."""
    path = tmp_path / "job.log"
    handler = logging.FileHandler(path)
    logging.getLogger().addHandler(handler)
    try:
        yield path
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
