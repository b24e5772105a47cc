"""Self-play's waits are stoppable: a stop inside a generation ends it within a move batch
with a checkpoint (the generation is played again on resume), in the learner's process and
with worker processes; a worker that hangs or dies is named (rank, pid, how it ended, the key
that sets the timeout)."""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import nullcontext
from pathlib import Path

import psutil
import pytest
from helpers import run_job, tiny_go5

from hetrl import checkpoint, experiment
from hetrl.actors.selfplay import SelfPlayPool, WorkerPool
from hetrl.actors.worker_logs import log, log_to
from hetrl.algos.mcts import SearchStats
from hetrl.faults import Stopped, StopRequest, WorkerLost
from hetrl.scheduler import selfplay

LONG_GENERATION = ("algo=alphazero", "steps=100000", "algo.width=8", "algo.blocks=1",
                   "algo.search.readouts=16", "algo.search.fast_readouts=8",
                   "selfplay.games_per_generation=200", "selfplay.concurrent_games=4",
                   "selfplay.train_steps=2", "selfplay.eval_games=2",
                   "selfplay.eval_readouts=4", "tracking=none")


def _announcing(function, started: threading.Event):
    def call(*args, **kwargs):
        started.set()
        return function(*args, **kwargs)

    return call


def _workers() -> list[psutil.Process]:
    return [p for p in psutil.Process().children()
            if "spawn_main" in (command := " ".join(p.cmdline()))
            and "resource_tracker" not in command]


@pytest.mark.parametrize(("workers", "group"), [(0, False), (2, False), (2, True)],
                         ids=["in-process", "workers", "workers-signalled-too"])
def test_a_stop_inside_a_generation_ends_it_within_a_second(tmp_path: Path, monkeypatch,
                                                            workers: int, group: bool):
    """`group`: the signal reaches the workers too (as a terminal's Ctrl-C or a launcher's
    SIGTERM to the process group does): they die of it, and the job still ends stopped, not
    with a lost worker."""
    stop, playing = StopRequest(), threading.Event()
    monkeypatch.setattr(experiment, "_stop_on_signals", lambda: nullcontext(stop))
    for owner, name in ((selfplay, "play_games"), (SelfPlayPool, "tasks")):
        monkeypatch.setattr(owner, name, _announcing(getattr(owner, name), playing))
    asked: list[float] = []

    def ask() -> None:
        playing.wait(120)
        time.sleep(2.0)  # the generation's games are under way
        asked.append(time.monotonic())
        stop.request(signal.SIGTERM)
        for worker in _workers() if group else []:
            os.kill(worker.pid, signal.SIGTERM)

    threading.Thread(target=ask, daemon=True).start()
    with pytest.raises(Stopped, match="stopped at step 0 by SIGTERM"):
        run_job(tmp_path, *LONG_GENERATION, f"selfplay.workers={workers}")
    assert time.monotonic() - asked[0] < 3.0
    assert checkpoint.load(tmp_path / "job0")["loop"].progress.generation == 0
    assert not _workers()


def test_a_hung_worker_is_named_after_selfplay_worker_timeout_s(tmp_path: Path):
    def freeze() -> None:
        deadline = time.monotonic() + 60
        while len(_workers()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        for worker in _workers():
            os.kill(worker.pid, signal.SIGSTOP)

    threading.Thread(target=freeze, daemon=True).start()
    start = time.monotonic()
    with pytest.raises(WorkerLost, match=r"self-play worker 0 \(pid \d+\), 1 \(pid \d+\) sent "
                                         r"nothing in \d s \(selfplay.worker_timeout_s\)"):
        run_job(tmp_path, *LONG_GENERATION, "selfplay.workers=2", "selfplay.worker_timeout_s=2")
    assert time.monotonic() - start < 60
    for worker in _workers():
        worker.kill()


def _last_words_then_exit(log_file: Path) -> None:
    log_to(log_file)
    log.info("about to exit")
    os._exit(3)


@pytest.mark.parametrize("logged", [False, True], ids=["job-log", "own-log"])
def test_a_dead_worker_is_named_at_once_with_its_exit_code(tmp_path: Path, logged: bool):
    """As a data-parallel trainer rank is waited for: not after the 600 s timeout; with the
    last line of its own log where it has one."""
    import multiprocessing as mp

    from hetrl.actors.workers import next_answer

    log_file = tmp_path / "workers" / "trainer-1.log"
    ctx = mp.get_context("fork")
    answers = ctx.Queue()
    dead = ctx.Process(target=_last_words_then_exit if logged else os._exit,
                       args=(log_file,) if logged else (3,))
    dead.start()
    dead.join()
    start = time.monotonic()
    with pytest.raises(WorkerLost) as lost:
        next_answer(answers, [dead], "trainer rank", 600, first_rank=1,
                    logs=[log_file] if logged else [])
    message = str(lost.value)
    assert time.monotonic() - start < 2
    if logged:
        assert f"trainer rank 1 (pid {dead.pid}, exit code 3; its last log line: '[" in message
        assert f"[hetrl.worker][INFO] - about to exit' ({log_file})) died" in message
        assert "job's log" not in message
    else:
        assert f"trainer rank 1 (pid {dead.pid}, exit code 3) died" in message
        assert "its last words, if any, are in the job's log above" in message


def test_worker_processes_start_inside_a_joblib_worker():
    """hydra/launcher=joblib runs a job in a loky worker, whose start method ('loky') a
    spawned child cannot set (`cannot find context for 'loky'`)."""
    from joblib import Parallel, delayed
    from spawned_child import start_a_spawned_child

    with Parallel(n_jobs=2, backend="loky") as parallel:
        bare, guarded = parallel(delayed(start_a_spawned_child)(g) for g in (False, True))
    assert bare == (1, "loky")  # what the pools met before `starting`
    assert guarded == (0, "loky")


def test_a_ctrl_c_to_the_workers_while_they_start_leaves_them_to_the_job(capfd):
    """A Ctrl-C reaches the whole process group, the workers too, even while they import:
    they ignore it (the job, which gets it as well, stops them), print no traceback, and
    play their games. (signal_trials: a basic self-play sweep's workers, Ctrl-C'd, printed
    KeyboardInterrupt tracebacks.)"""
    game, learner = tiny_go5()
    workers = WorkerPool(2, game, learner, seed=3, timeout_s=600)
    try:
        workers.start()
        for _ in range(3):  # as they start, then once they import and serve
            for process in workers.procs:
                os.kill(process.pid, signal.SIGINT)
            time.sleep(1.0)
        assert len(workers.play(4, 4, 10**6, 1, SearchStats())) == 4
        assert all(process.is_alive() for process in workers.procs)
    finally:
        workers.close()
    assert "Traceback" not in capfd.readouterr().err  # the workers' stderr is this process's
