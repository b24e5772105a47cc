"""The sync loop keeps SB3's schedule whatever the number of envs, and times its phases."""

from __future__ import annotations

import pytest
from helpers import run_job

SCHEDULE = ("algo=dqn", "env=cartpole", "steps=1000", "algo.learning_starts=200",
            "algo.train_freq=4", "algo.gradient_steps=2", "algo.hidden=[32]", "tracking=none")


@pytest.mark.parametrize("envs", ["env.n_envs=1", "env.n_envs=4",
                                  "env.n_envs=2 env.vectorization=async"])
def test_updates_follow_train_freq_and_gradient_steps(tmp_path, envs):
    result = run_job(tmp_path, *SCHEDULE, *envs.split())
    # a rollout of 4 env steps, then 2 updates, once more than 200 steps are stored
    assert result["updates"] == 2 * (1000 - 200) / 4
    assert result["episodes"] > 0 and result["return_mean_100"] > 0


def test_phases_are_timed_and_eps_host_follows_its_definition(tmp_path):
    result = run_job(tmp_path, *SCHEDULE, "algo.batch_size=32")
    phases = {k.removeprefix("phase/").removesuffix("_s"): v
              for k, v in result.items() if k.startswith("phase/") and k.endswith("_s")}
    assert set(phases) == {"act", "env", "replay_add", "sample", "update"}
    training_s = phases["replay_add"] + phases["sample"] + phases["update"]
    assert result["eps_host"] == pytest.approx(32 * result["updates"] / training_s)
    assert 0 < sum(phases.values()) <= 1000 / result["sps"]  # inside the loop's wall time


def test_bf16_precision_trains_ddpg(tmp_path):
    result = run_job(tmp_path, "algo=ddpg", "precision=bf16", "steps=400",
                     "algo.learning_starts=100", "algo.batch_size=32", "tracking=none")
    assert result["updates"] == 300 and result["learner/critic_loss"] >= 0
