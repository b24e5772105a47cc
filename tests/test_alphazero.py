"""algo=alphazero with scheduler=selfplay on Go: validation keeps it to Go envs and Go to it,
a tiny job trains and resumes through `experiment.run`, the network's symmetries, and a
learning test on go5."""

from __future__ import annotations

import logging
import math
import signal
from contextlib import nullcontext
from pathlib import Path

import matplotlib.image
import pytest
import torch
from helpers import build_job, compose_job, run_job, tracking_uri
from mlflow.tracking import MlflowClient

from hetrl import checkpoint, experiment
from hetrl.actors.selfplay import RayWorkerPool, WorkerPool
from hetrl.algos.alphazero import PolicyValueNet, augment, symmetry
from hetrl.config.errors import ConfigError
from hetrl.envs.go import GoGame
from hetrl.faults import Stopped, StopRequest
from hetrl.partition.graph import Pass
from hetrl.progress import TrainingProgress
from hetrl.validation import validate

TINY = ("steps=64", "algo.width=8", "algo.blocks=1", "algo.search.readouts=8",
        "algo.search.fast_readouts=4", "selfplay.games_per_generation=4",
        "selfplay.concurrent_games=4", "selfplay.train_steps=2", "selfplay.eval_games=2",
        "selfplay.eval_readouts=4", "selfplay.gating_games=2")


@pytest.mark.parametrize("overrides, words", [
    (("algo=alphazero", "env=cartpole"), ["algo=alphazero", "go5", "go9"]),
    (("algo=dqn", "env=go9"), ["env=go9", "alphazero"]),
    (("algo=alphazero", "scheduler=sync"), ["scheduler=sync", "selfplay"]),
    (("algo=alphazero", "selfplay.trainers=0"), ["selfplay.trainers"]),
    (("algo=alphazero", "selfplay.trainers=2", "precision=fp16"),
     ["precision=fp16", "selfplay.trainers=2", "precision=fp32"]),
    (("algo=alphazero", "selfplay.trainers=2", "precision=qat"), ["precision=qat"]),
    (("algo=alphazero", "stop_return=1"), ["stop_return=1", "scheduler=selfplay", "sync"]),
])
def test_validation_keeps_go_and_alphazero_together(overrides, words):
    cfg, choices = compose_job(*overrides)
    with pytest.raises(ConfigError) as error:
        validate(cfg, choices)
    for word in words:
        assert word in str(error.value)


def test_alphazero_brings_go5_and_selfplay():
    cfg, choices = compose_job("algo=alphazero")
    validate(cfg, choices)
    assert choices["env"] == "go5" and choices["scheduler"] == "selfplay"


def test_symmetries_move_planes_and_policy_together():
    n = 5
    planes = torch.zeros(8, 1, n, n)
    pi = torch.zeros(8, n * n + 1)
    planes[:, 0, 0, 1] = 1.0  # a stone on b1 ...
    pi[:, 1] = 1.0  # ... and the policy on b1
    out_planes, out_pi = augment(planes, pi, n, torch.arange(8))
    for k in range(8):
        assert out_pi[k, :-1].reshape(n, n).equal(out_planes[k, 0])
    assert len({tuple(out_pi[k].nonzero().flatten().tolist()) for k in range(8)}) == 8
    assert symmetry(planes[:1], 0).equal(planes[:1])


def test_the_host_times_every_layer_pass_of_the_training_step():
    """On platform=host the step's task graph is timed layer by layer (`host/plan_*`): the
    residual tower's convs, BNs and ReLUs, both heads, their backward passes."""
    components = build_job("algo=alphazero", "algo.width=8", "algo.blocks=1", plan=True)
    step = components.step_plan
    assert step.measured and step.plan.makespan > 0
    for node, seconds in zip(step.graph.nodes, step.costs.seconds[:, 0]):
        if node.pass_ is not Pass.update:
            assert seconds > 0, node.name
    assert components.learner.net.training  # the timed copy, not the learner, ran


def test_a_tiny_job_trains_checkpoints_and_resumes(tmp_path: Path):
    results = run_job(tmp_path, "algo=alphazero", *TINY, "selfplay.generations=1",
                      "checkpoint_every=1")
    assert results["updates"] == 2 and results["selfplay/games"] >= 1
    assert results["selfplay/leaf_evals_per_s"] > 0 and results["selfplay/mean_leaf_batch"] >= 1
    cfg, choices = compose_job(f"tracking.uri={tracking_uri(tmp_path)}", "algo=alphazero",
                               *TINY, "selfplay.generations=2", "steps=100000",
                               f"resume={tmp_path / 'job0'}")
    resumed = experiment.run(cfg, choices, tmp_path / "job0")
    assert resumed["run_id"] == results["run_id"]  # the saved job goes on in its MLflow run
    assert resumed["selfplay/generation"] == 1.0  # the saved config's budget: nothing left
    client = MlflowClient(tracking_uri(tmp_path))  # the sampled game: SGF, final board PNG
    artifacts = {a.path for a in client.list_artifacts(results["run_id"], "sgf")}
    assert artifacts == {"sgf/generation_0000.sgf", "sgf/generation_0000.png"}
    png = client.download_artifacts(results["run_id"], "sgf/generation_0000.png", str(tmp_path))
    assert matplotlib.image.imread(png).ndim == 3
    saved = checkpoint.load(tmp_path / "job0")
    loop = saved["loop"].progress
    assert loop.generation == 1 and len(loop.window) == 1
    assert saved["learner"]["generation"] in (0, 1) and saved["learner"]["updates"] == 2


def test_a_stop_between_generations_names_the_signal_and_resume_finishes_the_job(
        tmp_path: Path, monkeypatch):
    stop = StopRequest()

    class StopAfterFirstGeneration(TrainingProgress):
        def update(self, step, metrics, kind):
            super().update(step, metrics, kind)
            if "selfplay/generation" in metrics:
                stop.request(signal.SIGTERM)  # as the signal handler would

    monkeypatch.setattr(experiment, "_stop_on_signals", lambda: nullcontext(stop))
    monkeypatch.setattr(experiment, "TrainingProgress", StopAfterFirstGeneration)
    job = ("algo=alphazero", *TINY, "steps=100000", "selfplay.generations=2")
    with pytest.raises(Stopped, match=r"stopped at step \d+ by SIGTERM, after a checkpoint; "
                                      f"go on with: python -m hetrl resume={tmp_path / 'job0'}"):
        run_job(tmp_path, *job)
    monkeypatch.undo()
    assert checkpoint.load(tmp_path / "job0")["loop"].progress.generation == 1

    cfg, choices = compose_job(f"tracking.uri={tracking_uri(tmp_path)}",
                               f"resume={tmp_path / 'job0'}")
    resumed = experiment.run(cfg, choices, tmp_path / "job0")
    assert resumed["selfplay/generation"] == 2.0 and resumed["updates"] == 4


# what a seeded two-generation TINY run ends with (seed 3, go5), by `selfplay.trainers`
# (re-pinned with pass_when_done in the recipe; the row of 1 trainer is the same before and
# after the loop moved onto Updates.step)
PINNED = {
    1: {"updates": 4.0, "episodes": 8.0, "selfplay/window_positions": 194.0,
        "selfplay/best_generation": 2.0, "selfplay/gating_win_rate": 1.0,
        "selfplay/win_rate_vs_random": 0.0, "selfplay/win_rate_vs_gen0": 0.5,
        "selfplay/black_win_rate": 0.75, "selfplay/game_length": 48.75,
        "learner/loss": 3.7652981281280518, "learner/policy_loss": 3.2778029441833496,
        "learner/value_loss": 0.9729101061820984, "learner/l2": 10.402588844299316},
    2: {"updates": 4.0, "episodes": 8.0, "selfplay/window_positions": 206.0,
        "selfplay/best_generation": 2.0, "selfplay/gating_win_rate": 0.5,
        "selfplay/win_rate_vs_random": 0.5, "selfplay/win_rate_vs_gen0": 1.0,
        "selfplay/black_win_rate": 0.25, "selfplay/game_length": 49.5,
        "learner/loss": 3.8179378509521484, "learner/policy_loss": 3.313047170639038,
        "learner/value_loss": 1.0077015161514282, "learner/l2": 10.400687217712402},
}


@pytest.mark.parametrize("trainers", [1, 2])
def test_a_seeded_tiny_run_ends_with_the_pinned_numbers(tmp_path: Path, trainers: int):
    """Self-play, the window's batches, their symmetries (on every rank), gating and
    evaluation all draw from seeded generators in a fixed order: a change to the loop that
    keeps those draws keeps these numbers (the losses up to float rounding)."""
    results = run_job(tmp_path, "algo=alphazero", *TINY, "selfplay.generations=2",
                      "steps=100000", "seed=3", f"selfplay.trainers={trainers}",
                      "tracking=none")
    pinned = PINNED[trainers]
    assert {key: results[key] for key in pinned} == pytest.approx(pinned, rel=1e-5)


def test_a_generation_that_loses_its_gate_is_not_promoted(tmp_path: Path, caplog):
    """Seed 1's first trained network wins 1 of its 2 gating games against `best` (pinned),
    short of a `gating_win_rate` of 1.0: it is rejected. `best`, what self-play plays with,
    stays generation 0 (the checkpoint's `best` is the untrained network, its `net` trained
    on), and the metrics and the generation's log line say so."""
    with caplog.at_level(logging.INFO, logger="hetrl"):
        results = run_job(tmp_path, "algo=alphazero", *TINY, "selfplay.generations=1",
                          "selfplay.gating_win_rate=1.0", "seed=1", "tracking=none")
    assert results["selfplay/gating_win_rate"] == 0.5
    assert results["selfplay/accepted"] == 0.0 and results["selfplay/best_generation"] == 0.0
    assert "gating 0.50 (rejected)" in caplog.text
    saved = checkpoint.load(tmp_path / "job0")
    assert saved["learner"]["generation"] == 0
    modules, gen0 = saved["learner"]["modules"], saved["loop"].progress.generation_0
    assert all(modules[f"best.{key}"].equal(value) for key, value in gen0.items())
    assert not all(modules[f"net.{key}"].equal(value) for key, value in gen0.items())


def test_worker_processes_play_the_games(tmp_path: Path):
    results = run_job(tmp_path, "algo=alphazero", *TINY, "selfplay.generations=1",
                      "selfplay.workers=2", "tracking=none")
    assert results["selfplay/games"] >= 2 and results["updates"] == 2


@pytest.mark.parametrize(("actors", "pool"), [("local", WorkerPool), ("ray", RayWorkerPool)])
def test_build_makes_the_worker_pool_as_it_makes_the_actors_not_started(actors, pool):
    """Its workers start in the loop (test_worker_processes_play_the_games); a pool not
    started closes."""
    c = build_job("algo=alphazero", "selfplay.workers=2", f"actors={actors}",
                  "selfplay.worker_timeout_s=7")
    assert type(c.workers) is pool and c.workers.n == 2 and c.workers.timeout_s == 7
    assert c.workers.learner is c.learner and c.workers.game is c.envs.game
    assert not getattr(c.workers, "procs", None) and not getattr(c.workers, "handles", None)
    c.workers.close()


def test_data_parallel_trainers_train_a_generation_and_time_the_all_reduce(tmp_path: Path):
    results = run_job(tmp_path, "algo=alphazero", *TINY, "selfplay.generations=1",
                      "selfplay.trainers=2", "tracking=none")
    assert results["updates"] == 2 and results["learner/loss"] > 0
    net = PolicyValueNet(GoGame(5).planes, 5, 8, 1)  # go5, TINY's width and blocks
    params = sum(p.numel() for p in net.parameters())
    assert results["selfplay/allreduce_mb"] == pytest.approx(2 * 4 * params / 1e6)  # 2 updates
    assert 0 < results["selfplay/allreduce_s"] < results["selfplay/train_s"]


def test_one_trainer_logs_no_all_reduce(tmp_path: Path):
    results = run_job(tmp_path, "algo=alphazero", *TINY, "selfplay.generations=1",
                      "tracking=none")
    assert "selfplay/allreduce_s" not in results and "selfplay/allreduce_mb" not in results


def test_the_pure_mcts_ladder_is_logged_at_each_evaluation(tmp_path: Path):
    results = run_job(tmp_path, "algo=alphazero", *TINY, "selfplay.generations=1",
                      "selfplay.ladder_games=2", "selfplay.ladder_simulations=[4,16]",
                      "tracking=none")
    for sims in (4, 16):
        assert 0.0 <= results[f"selfplay/win_rate_vs_mcts{sims}"] <= 1.0
    assert "selfplay/win_rate_vs_mcts100" not in results


def test_the_wall_clock_ends_the_loop_before_a_generation_that_would_overrun(tmp_path: Path):
    """`selfplay.wall_clock_s`: the loop stops starting generations once another one, timed
    as the last, would end past the budget (here long before `generations`); with
    `eval_games=0` nothing is evaluated."""
    results = run_job(tmp_path, "algo=alphazero", *TINY, "selfplay.generations=100000",
                      "steps=100000000", "selfplay.wall_clock_s=6", "selfplay.eval_games=0",
                      "tracking=none")
    # (6 s: a tiny generation takes 1-2.5 s on a loaded 2-core host, its first the longest)
    assert 2 <= results["selfplay/generation"] < 100000
    assert 3.0 < results["selfplay/wall_s"] < 7.5
    assert math.isnan(results["selfplay/win_rate_vs_random"])


@pytest.mark.parametrize("override, words", [
    ("selfplay.wall_clock_s=0", ["selfplay.wall_clock_s=0", "null"]),
    ("selfplay.ladder_simulations=[0,100]", ["selfplay.ladder_simulations", "[0, 100]",
                                              ">= 1"]),
    ("selfplay.ladder_simulations=[100,100]", ["selfplay.ladder_simulations", "distinct"]),
    ("selfplay.ladder_games=-1", ["selfplay.ladder_games=-1", ">= 0"]),
])
def test_a_bad_ladder_is_a_config_error(override, words):
    with pytest.raises(ConfigError) as error:
        validate(*compose_job("algo=alphazero", override))
    for word in words:
        assert word in str(error.value)


@pytest.mark.slow
def test_alphazero_learns_to_beat_random_on_go5(tmp_path: Path):
    """The default job's recipe, shortened for CI: the latest generation wins >= 90% of 50
    games against a uniformly random player, colours alternating. On 5x5 a search of 32
    readouts with the untrained network already wins ~98% of them (measured), so the test
    also asks that it wins >= 60% against that untrained network (generation 0) at equal
    readouts: what learning adds (seeds 0 and 1 here: 88% and 96%; at 4 generations seed 0
    beat random in only 92%)."""
    results = run_job(tmp_path, "algo=alphazero", "tracking=none", "selfplay.generations=5",
                      "selfplay.eval_every=5")
    assert results["selfplay/generation"] == 5
    assert results["selfplay/win_rate_vs_random"] >= 0.9
    assert results["selfplay/win_rate_vs_gen0"] >= 0.6
