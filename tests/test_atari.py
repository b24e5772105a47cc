"""AP-DRL's Atari pairs (Table III): the envs with the standard wrappers, the Nature CNN in the
learners, the plan of the real step graph, and smoke runs (Atari learning needs far more than
2 cores)."""

from __future__ import annotations

import numpy as np
import torch
from helpers import NOT_MEASURED, build_job, mlflow_runs, run_job

from hetrl.partition.flops import PAPER_KINDS, per_sample_flops

TINY_DQN = ("steps=400", "algo.learning_starts=360", "algo.buffer_size=400", "log_every=200")


def test_dqn_breakout_plans_the_nature_cnn_step_on_versal_and_trains(tmp_path):
    result = run_job(tmp_path, "algo=dqn", "env=breakout", "platform=versal", "precision=mixed",
                     *TINY_DQN, *NOT_MEASURED)
    assert result["updates"] > 0 and result["eps_platform"] > 0
    runs = {r.data.tags["precision"]: r for r in mlflow_runs(tmp_path)}
    assert runs["mixed"].info.status == "FINISHED"
    assert "reward_error_pct" in runs["mixed"].data.metrics  # against its fp32 twin
    nodes = sum(runs["mixed"].data.metrics[f"platform/nodes_{d}"] for d in ("ps", "pl", "aie"))
    assert nodes > 15  # the 15 layer passes of the paper plus activations, loss and updates


def test_ppo_mspacman_runs_a_cnn_policy_and_critic(tmp_path):
    result = run_job(tmp_path, "algo=ppo", "env=mspacman", "steps=256", "env.n_envs=2",
                     "algo.n_steps=64", "algo.batch_size=64", "algo.n_epochs=1", "log_every=128",
                     "platform.measure_layers=false", *NOT_MEASURED)  # no per-layer timings
    assert result["updates"] == 2 * 2  # two rollouts of 128, two minibatches each
    c = build_job("algo=ppo", "env=mspacman")
    c.envs.close()
    learner = c.learner
    assert isinstance(learner.actor.net[1], torch.nn.Conv2d)  # [0] scales the uint8 frames
    graph = learner.task_graph(256)
    assert per_sample_flops(graph, 256, PAPER_KINDS) > 50e6  # AP-DRL: 106.23 M (shared trunk)


def test_frames_are_stored_as_bytes_and_returns_are_the_unclipped_score():
    c = build_job("algo=dqn", "env=mspacman", "algo.buffer_size=64", "algo.batch_size=32")
    envs, replay = c.envs, c.replay
    obs, _ = envs.reset(seed=0)
    envs.action_space.seed(0)
    rewards, episode_return = [], None
    for _ in range(5000):
        actions = envs.action_space.sample()
        next_obs, reward, terminated, truncated, info = envs.step(actions)
        replay.add(obs, actions, reward, next_obs, terminated)
        rewards.append(float(reward[0]))
        obs = next_obs
        if info.get("_episode", np.zeros(1, bool))[0]:
            episode_return = float(info["episode"]["r"][0])
            break
    envs.close()
    assert replay.obs.dtype == np.uint8 and replay.sample(8).obs.dtype == torch.uint8
    assert set(rewards) <= {-1.0, 0.0, 1.0}  # the learner sees sign-clipped rewards
    assert episode_return is not None and episode_return > sum(rewards)  # a pellet scores 10
