"""hetrl's update rules against SB3's, on the same weights and the same batches: where two
runs learn differently, this says whether the update is the cause. And the benchmarks' SB3
references leave nothing behind."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import build_job, compose_job

from hetrl.algos.base import Batch

sb3 = pytest.importorskip("stable_baselines3", reason="pip install -e '.[bench]'")


@pytest.mark.parametrize("td_loss", ["huber", "mse"])
def test_dqn_updates_as_sb3s_on_the_same_batches(td_loss):
    """SB3 as shipped (Huber), and with the benchmarks' squared error for algo.td_loss=mse."""
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.type_aliases import ReplayBufferSamples

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from common import sb3_model

    torch.manual_seed(0)
    job = ("algo=dqn", "env=cartpole", f"algo.td_loss={td_loss}", "tracking=none")  # rl-zoo3's
    learner = build_job(*job).learner
    n = learner.batch_size
    model = sb3_model(compose_job(*job)[0].algo, "CartPole-v1", learning_starts=0)
    model.set_logger(Logger(None, []))  # configure() would make a temp folder
    for net in (model.q_net.q_net, model.q_net_target.q_net, learner.q_target):
        net.load_state_dict(learner.q.state_dict())
    for _ in range(20):
        obs, next_obs = torch.randn(n, 4), torch.randn(n, 4)
        actions, rewards = torch.randint(2, (n,)), torch.ones(n)
        terminated = (torch.rand(n) < 0.1).float()
        batch = ReplayBufferSamples(obs, actions.view(-1, 1), next_obs, terminated.view(-1, 1),
                                    rewards.view(-1, 1), None)
        model.replay_buffer.sample = lambda *args, batch=batch, **kwargs: batch
        model.train(gradient_steps=1, batch_size=n)
        learner.learn(Batch(obs, actions, rewards, next_obs, terminated,
                             discounts=torch.full((n,), learner.gamma)))
    for ours, theirs in zip(learner.q.parameters(), model.q_net.q_net.parameters()):
        np.testing.assert_allclose(ours.detach(), theirs.detach(), atol=1e-6)
    assert not torch.equal(learner.q[0].weight, learner.q_target[0].weight)  # it did learn


def test_the_benchmarks_sb3_models_leave_no_log_folder(tmp_path, monkeypatch):
    """SB3's default logger makes an empty `SB3-<date>` folder in the temp dir at every
    `learn()` (verbose=0 too); the benchmarks' reference models log nowhere."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from common import sb3_model

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    model = sb3_model(compose_job("algo=dqn", "env=cartpole")[0].algo, "CartPole-v1",
                      learning_starts=16)
    model.learn(32)
    assert list(tmp_path.iterdir()) == []
