"""scheduler=selfplay with actors=ray: the self-play workers as Ray actors (Ray started here),
the same SelfPlayWorker as the process workers run, their games back through Ray's object
store, their placement reported as ActorQ's pool reports it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import compose_job, local_ray, metric_history, run_job, tracking_uri
from mlflow.tracking import MlflowClient
from test_alphazero import TINY

from hetrl.config.errors import ConfigError
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
    from hetrl.algos.alphazero import make_learner
    from hetrl.algos.mcts import SearchStats
    from hetrl.envs.go import GoGame
    from hetrl.actors.selfplay import RayWorkerPool, WorkerPool

    game = GoGame(5)
    learner = make_learner((game.planes, 5, 5), game.num_actions, width=8, blocks=1,
                           batch_size=8, lr_values=[0.01], lr_boundaries=[], momentum=0.9,
                           l2=1e-4, value_weight=0.5,
                           search={"readouts": 8, "fast_readouts": 4})
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
