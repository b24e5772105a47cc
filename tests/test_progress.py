"""The terminal: a bar that moves every second from the loop's step counter (the loop never
calls it), elapsed time and ETA, and progress lines in the job's log file with or without it;
one span of steps across a job and the reference run it trains."""

from __future__ import annotations

import io
import logging
import time

from helpers import mlflow_runs, run_job
from rich.console import Console

from hetrl import experiment
from hetrl.progress import Span, TrainingProgress
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
            deadline = time.monotonic() + 2.5  # a redraw every second shows it within one
            while f"{step}/10000" not in out.getvalue() and time.monotonic() < deadline:
                time.sleep(0.05)
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


def test_a_twin_s_bar_goes_on_where_its_job_s_stopped_within_one_total():
    console, out = fake_terminal()
    loop, span, starts = Loop(), Span(2_000), []  # a job of 1,000 steps, then its twin of 1,000
    for step in (1_000, 500):  # each bar's last redraw: at its close
        loop.step = step
        run = TrainingProgress(1_000, 0, "run", counter=lambda: loop.step, console=console,
                               span=span)
        starts.append(run.bar.tasks[0].start_time)
        time.sleep(0.01)
        run.close()
    assert "1000/2000" in out.getvalue() and "1500/2000" in out.getvalue()
    assert span.done == 2_000
    assert starts[0] == starts[1] is not None  # the twin's elapsed time goes on from the job's
    TrainingProgress(1_000, 0, "unplanned twin", console=console, span=span).close()
    assert "2000/3000" in out.getvalue()  # a run the job did not plan widens the total


def test_a_job_that_trains_its_reference_run_shows_one_bar_over_both(tmp_path, monkeypatch):
    console, out = fake_terminal()

    class OnTerminal(TrainingProgress):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs, console=console)

    monkeypatch.setattr(experiment, "TrainingProgress", OnTerminal)
    run_job(tmp_path, "algo=dqn", "steps=200", "algo.learning_starts=100", "algo.train_freq=4",
            "algo.gradient_steps=1", "algo.hidden=[8]", "algo.batch_size=8", "log_every=100",
            "precision=bf16", "eval.final=0",
            "platform.measure_layers=false")  # no bf16 timings: not the bar's
    text = out.getvalue()
    # the job's bar ends at 200 of the 400 steps of both runs; the fp32 twin's takes it to 400
    assert "200/400" in text and "400/400" in text and "/200" not in text


def test_a_job_that_never_learned_ends_its_bar_whole_without_its_twin(tmp_path, monkeypatch):
    """The job planned its fp32 twin (the bar's total covers both), then made no update (its
    first update would come at step 256): no twin is trained, and its bar ends at its own
    total rather than at half of both."""
    console, out = fake_terminal()

    class OnTerminal(TrainingProgress):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs, console=console)

    monkeypatch.setattr(experiment, "TrainingProgress", OnTerminal)
    results = run_job(tmp_path, "algo=dqn", "steps=200", "algo.learning_starts=100",
                      "algo.train_freq=256", "algo.hidden=[8]", "log_every=100",
                      "precision=bf16", "eval.final=0", "platform.measure_layers=false")
    assert results["updates"] == 0 and len(mlflow_runs(tmp_path)) == 1  # no twin trained
    text = out.getvalue()
    assert "0/400" in text and "200/200" in text and "200/400" not in text
