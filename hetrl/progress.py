"""Progress of a training loop: a rich bar on a terminal that moves every second, and a log
line every `log_every` env steps, in the job's log file whether or not the bar is shown.

A job that trains its reference twin when it ends shares a `Span` with the twin: the twin's
bar goes on where the job's stopped, and both bars' total and ETA cover the two runs.

The loop pays nothing for the bar: rich's own refresh thread reads the loop's step counter
(`counter`, e.g. `lambda: state.step`) when it redraws; the loop only hands over its metrics
when it logs them.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import Callable, Mapping

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from hetrl.scheduler.state import Report

log = logging.getLogger("hetrl")

REFRESH_PER_SECOND = 2


class _CountedProgress(Progress):
    """A Progress whose task follows a counter, read at every refresh (not by the loop)."""

    def __init__(self, *columns, counter: Callable[[], int], **kwargs) -> None:
        self.counter = counter
        self.task_id = None
        super().__init__(*columns, **kwargs)

    def get_renderables(self):
        if self.task_id is not None:
            self.update(self.task_id, completed=self.counter())
        yield from super().get_renderables()


class _NotProgress(logging.Filter):
    """Keeps the progress lines off the terminal while the bar shows them (the log file
    still gets them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, "progress", False)


@dataclass
class Span:
    """The env steps one bar covers across a job and the twins it trains after itself:
    `total` planned, `done` by the runs whose bars closed, and when the first bar `started`
    (rich's clock: a twin's elapsed time goes on from the job's)."""

    total: int
    done: int = 0
    started: float | None = None


class TrainingProgress:
    def __init__(self, total: int, start: int, title: str,
                 counter: Callable[[], int] | None = None, console: Console | None = None,
                 span: Span | None = None) -> None:
        self.total = total
        self.title = title
        self.step = start
        self.span = span or Span(total)
        self.span.total = max(self.span.total, self.span.done + total)  # an unplanned twin
        count = counter or (lambda: self.step)
        console = console or Console(stderr=True)
        self.bar: _CountedProgress | None = None
        self._handlers: list[tuple[logging.StreamHandler, object]] = []
        self._filter = _NotProgress()
        if console.is_terminal:
            self.bar = _CountedProgress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("return {task.fields[ret]}  sps {task.fields[sps]}"),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=console,
                counter=lambda done=self.span.done: done + count(),
                refresh_per_second=REFRESH_PER_SECOND,
            )
            self.bar.task_id = self.bar.add_task(title, total=self.span.total,
                                                 completed=self.span.done + start,
                                                 ret="-", sps="-")
            self._carry_start(self.bar.tasks[-1])
            self.bar.start()
            self._route_console_logs()

    def _carry_start(self, task: Task) -> None:
        """The span's first bar starts its clock; a twin's bar takes that start."""
        if self.span.started is None:
            self.span.started = task.start_time
        else:
            task.start_time = self.span.started

    def _route_console_logs(self) -> None:
        """Log lines meant for the terminal print above the bar (through rich's redirected
        stdout/stderr) instead of under it; progress lines stay in the log files only."""
        seen = set()
        for logger in (logging.getLogger(), log):
            for handler in logger.handlers:
                if (type(handler) is not logging.StreamHandler or id(handler) in seen
                        or handler.stream not in (sys.__stdout__, sys.__stderr__)):
                    continue
                seen.add(id(handler))
                previous = handler.stream
                proxy = sys.stdout if previous is sys.__stdout__ else sys.stderr
                if proxy is not previous:
                    handler.setStream(proxy)
                handler.addFilter(self._filter)
                self._handlers.append((handler, previous))

    def update(self, step: int, metrics: Mapping[str, float], kind: Report) -> None:
        """At a log step: the bar's figures, and a line for the log. An evaluation gets a
        line of its own; an event (a PEARL decision) none."""
        if kind is Report.evaluation:
            log.info("%s step %d/%d eval/return_mean %.1f", self.title, step, self.total,
                     metrics["eval/return_mean"], extra={"progress": self.bar is not None})
            return
        if kind is Report.event:
            return
        self.step = step
        ret = metrics.get("return_mean_100")
        ret_text = "-" if ret is None else f"{ret:.1f}"
        sps = f"{metrics['sps']:.0f}"
        if self.bar is not None:
            self.bar.update(self.bar.task_id, completed=self.span.done + step, ret=ret_text,
                            sps=sps)
        log.info("%s step %d/%d return_mean_100 %s sps %s", self.title, step, self.total,
                 ret_text, sps, extra={"progress": self.bar is not None})

    def close(self, last: bool = False) -> None:
        """Stop the bar; the span counts this run's steps as done. `last`: no run follows in the
        span after all (a planned twin is skipped): its total ends here, the bar shows it whole."""
        self.span.done += self.total
        if last:
            self.span.total = self.span.done
        if self.bar is not None:
            self.bar.update(self.bar.task_id, total=self.span.total)  # its last redraw's
            self.bar.stop()
            self.bar = None
        for handler, stream in self._handlers:
            handler.removeFilter(self._filter)
            if handler.stream is not stream:
                handler.setStream(stream)
        self._handlers = []
