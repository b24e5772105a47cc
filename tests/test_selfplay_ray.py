"""scheduler=selfplay with actors=ray: the self-play workers as Ray actors (Ray started here),
the same SelfPlayWorker as the process workers run, their games back through Ray's object
store, their placement reported as ActorQ's pool reports it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import compose_job, metric_history, run_job, tracking_uri
from mlflow.tracking import MlflowClient
from test_alphazero import TINY

from hetrl.config.errors import ConfigError
from hetrl.validation import validate

pytest.importorskip("ray")


def test_ray_workers_play_a_generation(tmp_path: Path):
    # 4 games, 2 a worker, both started at once: 4 games back means both workers played
    results = run_job(tmp_path, "algo=alphazero", "scheduler=selfplay", "actors=ray",
                      "scheduler.workers=2", *TINY, "scheduler.generations=1",
                      "scheduler.gating_games=0")
    assert results["selfplay/games"] == 4 and results["updates"] == 2
    assert results["selfplay/leaf_evals_per_s"] > 0 and results["selfplay/mean_leaf_batch"] >= 1
    assert metric_history(tmp_path, results["run_id"], "actors/nodes") == [(0, 1.0)]
    client = MlflowClient(tracking_uri(tmp_path))
    path = client.download_artifacts(results["run_id"], "actors/placement.json", str(tmp_path))
    placement = json.loads(Path(path).read_text())
    assert sorted(placement) == ["0", "1"] and len(set(placement.values())) == 1


def test_ray_needs_workers():
    cfg, choices = compose_job("algo=alphazero", "actors=ray", "scheduler.workers=0")
    with pytest.raises(ConfigError, match="scheduler.workers"):
        validate(cfg, choices)
    cfg, choices = compose_job("algo=alphazero", "actors=process")
    with pytest.raises(ConfigError, match="actors=ray"):
        validate(cfg, choices)
