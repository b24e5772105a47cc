"""A2C and PPO: GAE by hand, learning on CartPole, phases, scheduler pairing, exact resume."""

from __future__ import annotations

import threading
from collections import Counter
from contextlib import nullcontext

import pytest
import torch
from helpers import build_job, compose_job, metric_history, run_job

from hetrl import experiment
from hetrl.config.errors import ConfigError
from hetrl.progress import TrainingProgress
from hetrl.replay.rollout import gae
from hetrl.scheduler.context import Stopped
from hetrl.validation import validate

FAST = ("tracking=none",)


def test_gae_matches_a_hand_computed_rollout():
    # env 0: step 1 terminates, step 2 is truncated with V(final obs) = 4; env 1 runs on.
    rewards = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    values = torch.tensor([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0], [1.0, 0.0]])
    terminated = torch.tensor([[False, False], [True, False], [False, False], [False, False]])
    truncated = torch.tensor([[False, False], [False, False], [True, False], [False, False]])
    final_values = torch.tensor([[0.0, 0.0], [0.0, 0.0], [4.0, 0.0], [0.0, 0.0]])
    last_values = torch.tensor([2.0, 4.0])
    advantages = gae(rewards, values, terminated, truncated, final_values, last_values,
                     gamma=0.5, gae_lambda=0.5)
    # env 0 deltas: 1 + .5·2 − 1 = 1; 1 − 2 = −1 (no bootstrap); 1 + .5·4 − 3 = 0; 1 + .5·2 − 1
    # = 1; carried by γλ = .25 except across the ends after steps 1 and 2.
    # env 1 deltas: 0, 0, 0, .5·4 = 2; carried back: 2, .5, .125, .03125.
    expected = torch.tensor([[0.75, 0.03125], [-1.0, 0.125], [0.0, 0.5], [1.0, 2.0]])
    torch.testing.assert_close(advantages, expected)


def _curve(tmp_path, result):
    return [v for _, v in metric_history(tmp_path, result["run_id"], "return_mean_100")]


@pytest.mark.slow
def test_ppo_learns_cartpole(tmp_path):
    # the tuned rl-zoo3 setup (8 envs, n_steps 32, minibatch 256, 20 epochs) on 30k steps
    result = run_job(tmp_path, "algo=ppo", "steps=30000", "log_every=2560", "stop_return=150")
    curve = _curve(tmp_path, result)
    assert curve[-1] >= 150 and curve[-1] >= 3 * curve[0], curve


@pytest.mark.slow
def test_a2c_learns_cartpole(tmp_path):
    result = run_job(tmp_path, "algo=a2c", "steps=30000", "log_every=2000")
    curve = _curve(tmp_path, result)
    assert result["updates"] == 30000 / (5 * 8)
    assert curve[-1] >= 100 and curve[-1] >= 3 * curve[0], curve


def test_a2c_and_ppo_bring_the_onpolicy_scheduler_to_box_envs_too():
    for algo in ("a2c", "ppo"):
        cfg, choices = compose_job(f"algo={algo}", "env=pendulum")
        validate(cfg, choices)
        assert choices["scheduler"] == "onpolicy"


def test_phases_are_timed_and_the_schedule_covers_the_rollout(tmp_path):
    result = run_job(tmp_path, "algo=ppo", "env.n_envs=2", "steps=512", "algo.n_steps=64",
                     "algo.batch_size=50", "algo.n_epochs=3", *FAST)
    phases = {k.removeprefix("phase/").removesuffix("_s"): v
              for k, v in result.items() if k.startswith("phase/") and k.endswith("_s")}
    assert set(phases) == {"act", "env", "rollout_add", "advantages", "sample", "update"}
    # 4 rollouts of 128 transitions, each 3 epochs of 3 minibatches (50, 50, 28)
    assert result["updates"] == 4 * 3 * 3
    training_s = sum(phases[p] for p in ("rollout_add", "advantages", "sample", "update"))
    assert result["eps_host"] == pytest.approx(50 * result["updates"] / training_s)
    assert {"learner/clip_fraction", "learner/approx_kl", "return_mean_100"} <= set(result)


@pytest.mark.parametrize("env", ["cartpole", "pendulum"])
def test_task_graph_runs_actor_and_critic_through_one_loss(env):
    learner = build_job("algo=ppo", f"env={env}").learner
    graph = learner.task_graph(learner.batch_size)
    passes = Counter((node.network, node.pass_.value) for node in graph.nodes)
    # each tanh MLP: 3 Linear + 2 Tanh forward and backward, 3 weight updates
    for net in ("actor", "critic"):
        assert (passes[(net, "forward")], passes[(net, "backward")], passes[(net, "update")]) \
            == (5, 5, 3)
    assert passes[("loss", "forward")] == 1 and len(graph.nodes) == 27


@pytest.mark.parametrize(("algo", "scheduler", "valid"), [
    ("ppo", "sync",
     "scheduler from ['onpolicy'] or algo from ['alphazero', 'd4pg', 'ddpg', 'dqn', 'maddpg', "
     "'matd3', 'td3']"),
    ("dqn", "onpolicy",
     "scheduler from ['actorq', 'pearl', 'selfplay', 'sync'] or algo from ['a2c', 'ppo']"),
])
def test_an_algo_and_a_scheduler_that_do_not_fit_are_named(algo, scheduler, valid):
    cfg, choices = compose_job(f"algo={algo}", f"scheduler={scheduler}")
    with pytest.raises(ConfigError) as err:
        validate(cfg, choices)
    message = str(err.value)
    assert f"algo={algo}" in message and f"scheduler={scheduler}" in message and valid in message


def test_a_stopped_and_resumed_run_ends_as_the_uninterrupted_one(tmp_path, monkeypatch):
    job = ("algo=ppo", "steps=2048", "algo.n_epochs=2", "log_every=256",
           "checkpoint_every=512", *FAST)
    reference = run_job(tmp_path, *job)

    stop = threading.Event()

    class StopAfter1000(TrainingProgress):
        def update(self, step, metrics, kind):
            super().update(step, metrics, kind)
            if step >= 1000:
                stop.set()  # as SIGTERM would; the loop checkpoints and stops after it

    monkeypatch.setattr(experiment, "_stop_on_signals", lambda: nullcontext(stop))
    monkeypatch.setattr(experiment, "TrainingProgress", StopAfter1000)
    with pytest.raises(Stopped, match="stopped at step 1280"):
        run_job(tmp_path, *job)
    monkeypatch.undo()

    cfg, choices = compose_job("tracking=none", f"resume={tmp_path / 'job1'}")
    resumed = experiment.run(cfg, choices, tmp_path / "resumed")
    same = [k for k in reference if k.startswith("learner/")
            or k in ("return_mean_100", "episodes", "updates")]
    assert {k: resumed[k] for k in same} == {k: reference[k] for k in same}
