"""scheduler=selfplay with actors=ray: the self-play workers as Ray actors (Ray started here),
the same SelfPlayWorker as the process workers run, their games back through Ray's object
store, their placement reported as ActorQ's pool reports it."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest
from helpers import compose_job, local_ray, metric_history, run_job, tiny_go5, tracking_uri
from mlflow.tracking import MlflowClient
from test_alphazero import TINY

from hetrl.actors.selfplay import RayWorkerPool, WorkerPool
from hetrl.algos.mcts import SearchStats
from hetrl.config.errors import ConfigError
from hetrl.faults import WorkerLost
from hetrl.validation import validate

pytest.importorskip("ray")


@pytest.fixture(scope="module", name="local_ray")
def _local_ray():
    """One local Ray for the module's tests (helpers.local_ray)."""
    with local_ray():
        yield


def test_ray_workers_play_a_generation(tmp_path: Path, local_ray):
    # 4 games, 2 a worker, both started at once: 4 games back means both workers played
    results = run_job(tmp_path, "algo=alphazero", "scheduler=selfplay", "actors=ray",
                      "selfplay.workers=2", *TINY, "selfplay.generations=1",
                      "selfplay.gating_games=0")
    assert results["selfplay/games"] == 4 and results["updates"] == 2
    assert results["selfplay/leaf_evals_per_s"] > 0 and results["selfplay/mean_leaf_batch"] >= 1
    assert metric_history(tmp_path, results["run_id"], "actors/nodes") == [(0, 1.0)]
    client = MlflowClient(tracking_uri(tmp_path))
    path = client.download_artifacts(results["run_id"], "actors/placement.json", str(tmp_path))
    placement = json.loads(Path(path).read_text())
    assert sorted(placement) == ["0", "1"] and len(set(placement.values())) == 1


def test_ray_needs_workers():
    cfg, choices = compose_job("algo=alphazero", "actors=ray", "selfplay.workers=0")
    with pytest.raises(ConfigError, match="selfplay.workers"):
        validate(cfg, choices)
    cfg, choices = compose_job("algo=alphazero", "actors=process")
    with pytest.raises(ConfigError, match="actors=ray"):
        validate(cfg, choices)


def test_ray_and_process_workers_play_the_same_games(local_ray):
    """The same workers wherever they run: with the same weights, seed and generation, the
    Ray actors play move for move the games the OS processes play."""
    game, learner = tiny_go5()
    games = {}
    for name, pool in (("process", lambda: WorkerPool(2, game, learner, seed=3, timeout_s=600)),
                       ("ray", lambda: RayWorkerPool(2, game, learner, seed=3, timeout_s=600,
                                                      address=None))):
        workers = pool()
        try:
            workers.start()
            records = workers.play(4, 4, 10**6, 1, SearchStats())
        finally:
            workers.close()
        games[name] = sorted((r.moves, r.winner) for r in records)
    assert len(games["process"]) == 4 and len({str(m) for m, _ in games["process"]}) > 1
    assert games["ray"] == games["process"]


@pytest.mark.usefixtures("job_log")
def test_a_hung_ray_worker_is_named_with_its_last_log_line(tmp_path: Path, local_ray):
    """As a hung process worker is (test_selfplay_stops): each silent Ray actor by rank, Ray
    actor id, pid and node, and the last line of its own log in the job's workers/ folder."""
    game, learner = tiny_go5()
    workers = RayWorkerPool(2, game, learner, seed=3, timeout_s=2, address=None)
    try:
        workers.start()
        assert len(workers.play(2, 2, 10**6, 1, SearchStats())) == 2
        pids = [int(re.search(r"pid (\d+)", name)[1]) for name in workers.placed.names]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        said = [rf"{rank} \(Ray actor [0-9a-f]{{12}}, pid {pid} on [\d.]+/[0-9a-f]{{12}}; its "
                rf"last log line: '.*generation 1: 1 games' "
                rf"\({re.escape(str(tmp_path / 'workers' / f'selfplay-{rank}.log'))}\)\)"
                for rank, pid in enumerate(pids)]
        with pytest.raises(WorkerLost, match=rf"self-play worker {', '.join(said)} sent nothing "
                                             r"in 2 s \(selfplay.worker_timeout_s\)"):
            workers.play(2, 2, 10**6, 2, SearchStats())
    finally:
        workers.close()
