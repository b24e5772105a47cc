"""Progress of a training loop: a rich bar on a terminal, plain log lines elsewhere."""

from __future__ import annotations

import logging
from typing import Mapping

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

log = logging.getLogger("hetrl")


class TrainingProgress:
    def __init__(self, total: int, start: int, title: str) -> None:
        self.total = total
        self.title = title
        console = Console(stderr=True)
        self.bar: Progress | None = None
        if console.is_terminal:
            self.bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("return {task.fields[ret]}  sps {task.fields[sps]}"),
                TimeRemainingColumn(),
                console=console,
            )
            self.task = self.bar.add_task(title, total=total, completed=start, ret="-", sps="-")
            self.bar.start()

    def update(self, step: int, metrics: Mapping[str, float]) -> None:
        ret = metrics.get("return_mean_100")
        ret_text = "-" if ret is None else f"{ret:.1f}"
        sps = f"{metrics.get('sps', 0.0):.0f}"
        if self.bar is not None:
            self.bar.update(self.task, completed=step, ret=ret_text, sps=sps)
        else:
            log.info("%s step %d/%d return_mean_100 %s sps %s", self.title, step, self.total,
                     ret_text, sps)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
