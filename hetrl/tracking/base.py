"""The tracker interface (MLflow, TensorBoard), and the tracker that records nothing
(`tracking=none`)."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Protocol

JOB_NUM_TAG = "job_num"
"""The tag of a sweep's job: its number in the sweep (Hydra's `hydra.job.num`), whatever
order the launcher ran the jobs in."""
REFERENCE_TAG = "reference_for"
"""The tag of a run that a job trained as its reference (fp32 for `reward_error_pct`, fp32
actors for `time_to_95pct_s`), valued the job's run id: in a sweep it is a child of the parent
beside the jobs, but not one of them."""
VIDEOS = "videos"
"""The run's artifact folder of its episode videos (`python -m hetrl.evaluate <run>
video=true`), which a sweep's report links."""


class Tracker(Protocol):
    run_id: str | None

    def start(self, name: str, tags: Mapping[str, str], run_id: str | None = None) -> None:
        """Open a new run, or reopen `run_id` (resume)."""

    def log_params(self, params: Mapping[str, object]) -> None: ...

    def set_tags(self, tags: Mapping[str, str]) -> None: ...

    def find_metric(self, tags: Mapping[str, str], metric: str) -> float | None:
        """The final `metric` of the latest FINISHED run with these tags, if any."""

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...

    def log_artifact(self, path: Path, folder: str | None = None) -> None:
        """Copy the file at `path` into the run's artifacts (into `folder` of them)."""

    def log_text(self, text: str, name: str) -> None: ...

    def end(self, status: str) -> None:
        """Close the run as FINISHED, FAILED or KILLED."""

    def where(self) -> str | None:
        """Where to look at the run (a UI's URL, a folder), for the terminal; None: nowhere."""


class NullTracker:
    """Keeps nothing; for quick runs and tests that do not look at tracking."""

    run_id: str | None = None

    def __init__(self, uri: str | None, experiment: str | None) -> None:
        pass  # the keys every tracking option has, unused

    def start(self, name: str, tags: Mapping[str, str], run_id: str | None = None) -> None:
        pass

    def log_params(self, params: Mapping[str, object]) -> None:
        pass

    def set_tags(self, tags: Mapping[str, str]) -> None:
        pass

    def find_metric(self, tags: Mapping[str, str], metric: str) -> float | None:
        return None

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        pass

    def log_artifact(self, path: Path, folder: str | None = None) -> None:
        pass

    def log_text(self, text: str, name: str) -> None:
        pass

    def end(self, status: str) -> None:
        pass

    def where(self) -> str | None:
        return None
