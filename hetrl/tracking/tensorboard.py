"""TensorBoard tracking (`tracking=tensorboard`): one event-file folder per job.

Metrics are scalars over env steps; params, tags and text artifacts are text summaries;
pictures are images; every artifact is also copied to the job's `artifacts/` folder. A
`run.json` beside the events keeps the tags, status and final metrics, so that reference
runs (fp32, fp32 actors) are found again instead of being retrained.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Mapping

from hetrl.tracking.metadata import system_tags

RUN_FILE = "run.json"


class TensorboardTracker:
    def __init__(self, logdir: str, uri: str | None, experiment: str | None) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as error:  # the optional `tensorboard` package
            raise ImportError("tracking=tensorboard needs the tensorboard package "
                              "(pip install -e '.[tensorboard]')") from error
        self._writer_class = SummaryWriter
        self.logdir = Path(logdir)
        self.run_id: str | None = None  # the job's folder
        self.writer = None
        self._record: dict = {}

    def start(self, name: str, tags: Mapping[str, str], run_id: str | None = None) -> None:
        if run_id is not None:  # resume: the same folder goes on
            folder = Path(run_id)
            self._record = json.loads((folder / RUN_FILE).read_text())
        else:
            folder = self.logdir / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
            while folder.exists():
                folder = folder.with_name(folder.name + "_")
            folder.mkdir(parents=True)
            self._record = {"name": name, "tags": {**system_tags(name), **tags},
                            "metrics": {}, "params": {}}
        self.run_id = str(folder)
        self._record["status"] = "RUNNING"
        self.writer = self._writer_class(log_dir=self.run_id)
        if run_id is None:
            self.writer.add_text("tags", _table(self._record["tags"]), 0)
        self._save()

    def _save(self) -> None:
        (Path(self.run_id) / RUN_FILE).write_text(json.dumps(self._record, indent=1))

    def log_params(self, params: Mapping[str, object]) -> None:
        self._record["params"].update({k: str(v) for k, v in params.items()})
        self.writer.add_text("params", _table(self._record["params"]), 0)
        self._save()

    def set_tags(self, tags: Mapping[str, str]) -> None:
        self._record["tags"].update({k: str(v) for k, v in tags.items()})
        self.writer.add_text("tags", _table(self._record["tags"]), 0)
        self._save()

    def find_metric(self, tags: Mapping[str, str], metric: str) -> float | None:
        """The final `metric` of the latest FINISHED run under `logdir` with these tags."""
        found = []
        for path in self.logdir.glob(f"*/{RUN_FILE}"):
            record = json.loads(path.read_text())
            if (record.get("status") == "FINISHED" and metric in record.get("metrics", {})
                    and all(record["tags"].get(k) == str(v) for k, v in tags.items())):
                found.append((path.stat().st_mtime, record["metrics"][metric]))
        return max(found)[1] if found else None

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, float(value), step)
        self._record["metrics"].update({k: float(v) for k, v in metrics.items()})

    def log_artifact(self, path: Path, folder: str | None = None) -> None:
        path = Path(path)
        artifacts = Path(self.run_id) / "artifacts" / (folder or "")
        artifacts.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, artifacts / path.name)
        if path.suffix == ".png":
            import matplotlib.image

            image = matplotlib.image.imread(path)[..., :3]
            tag = f"{folder}/{path.stem}" if folder else path.stem
            self.writer.add_image(tag, image, 0, dataformats="HWC")

    def log_text(self, text: str, name: str) -> None:
        path = Path(self.run_id) / "artifacts" / name  # a name may hold folders
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        self.writer.add_text(name, "    " + text.replace("\n", "\n    "), 0)

    def end(self, status: str) -> None:
        self.writer.add_text("status", status, 0)
        self.writer.close()
        self._record["status"] = status
        self._save()

    def where(self) -> str:
        return f"TensorBoard run {self.run_id}  (open it: tensorboard --logdir {self.logdir})"


def _table(values: Mapping[str, object]) -> str:
    rows = [f"| {k} | {str(v).replace('|', '/')} |" for k, v in sorted(values.items())]
    return "\n".join(["| key | value |", "|---|---|", *rows])
