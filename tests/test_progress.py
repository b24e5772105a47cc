"""The terminal: a bar that moves every second from the loop's step counter (the loop never
calls it), elapsed time and ETA, and progress lines in the job's log file with or without it."""

from __future__ import annotations

import io
import logging
import time

from rich.console import Console

from hetrl.progress import TrainingProgress
from hetrl.scheduler.state import Report


class Loop:
    step = 0


def fake_terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(force_terminal=True, file=out, width=150), out


def test_the_bar_follows_the_step_counter_every_second_with_elapsed_and_eta():
    console, out = fake_terminal()
    loop = Loop()
    progress = TrainingProgress(10_000, 0, "dqn-cartpole", counter=lambda: loop.step,
                                console=console)
    try:
        for step in (1_200, 2_400, 3_600):  # the loop counts; it never calls the bar
            loop.step = step
            time.sleep(1.2)
            assert f"{step}/10000" in out.getvalue(), out.getvalue()[-500:]
    finally:
        progress.close()
    text = out.getvalue()
    assert "0:00:0" in text  # elapsed
    assert "eta" in text and "-:--:--" not in text.rsplit("3600/10000", 1)[1]  # an ETA


def test_progress_lines_reach_the_log_file_with_the_bar_shown(tmp_path):
    console, out = fake_terminal()
    logfile = tmp_path / "__main__.log"
    handler = logging.FileHandler(logfile)
    root = logging.getLogger()
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)
    try:
        progress = TrainingProgress(2_000, 0, "dqn-cartpole", console=console)
        progress.update(1_000, {"return_mean_100": 21.5, "sps": 900.0}, Report.loop)
        progress.close()
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        handler.close()
    assert "dqn-cartpole step 1000/2000 return_mean_100 21.5 sps 900" in logfile.read_text()
    assert "return 21.5" in out.getvalue()  # and the bar shows them


def test_without_a_terminal_the_progress_lines_are_plain_log_lines(caplog):
    out = io.StringIO()
    progress = TrainingProgress(2_000, 0, "job", console=Console(file=out))
    with caplog.at_level(logging.INFO, logger="hetrl"):
        progress.update(1_000, {"sps": 10.0}, Report.loop)
    progress.close()
    assert out.getvalue() == "" and "job step 1000/2000 return_mean_100 - sps 10" in caplog.text


def test_an_evaluation_gets_its_own_line_and_an_event_none(caplog):
    progress = TrainingProgress(2_000, 0, "job", console=Console(file=io.StringIO()))
    with caplog.at_level(logging.INFO, logger="hetrl"):
        progress.update(1_000, {"eval/return_mean": 187.25, "eval/return_std": 3.0},
                        Report.evaluation)
        progress.update(1_000, {"pearl/decision": 1.0}, Report.event)
    progress.close()
    assert [r.getMessage() for r in caplog.records] == ["job step 1000/2000 eval/return_mean 187.2"]
