"""Stops reach every job of a parallel sweep."""

from __future__ import annotations

import signal
import threading

import pytest
from helpers import mlflow_runs, run_job

from hetrl.faults import Stopped


def test_a_stop_sent_to_a_worker_between_two_jobs_stops_the_next_before_its_run(tmp_path):
    """A sweep's worker inherits SIGINT and SIGTERM blocked: one sent between two jobs waits,
    and the next job stops as it begins, leaving no run and its signals blocked again."""
    main = threading.main_thread().ident
    handler = signal.signal(signal.SIGTERM, lambda *_: None)  # were it to get through
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        signal.pthread_kill(main, signal.SIGTERM)  # pending
        with pytest.raises(Stopped) as stopped:
            run_job(tmp_path, "algo=dqn", "steps=300", "algo.learning_starts=100")
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGTERM, handler)
    assert stopped.value.signum == signal.SIGTERM and stopped.value.step is None
    assert signal.SIGTERM in blocked
    assert not (tmp_path / "mlflow.db").exists() or mlflow_runs(tmp_path) == []
