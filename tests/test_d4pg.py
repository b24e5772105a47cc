"""D4PG: n-step transitions and the projected distributional target on hand-computed cases,
and short runs on a DeepMind Control task."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import metric_history, run_job

from hetrl.algos.d4pg import project
from hetrl.replay.nstep import NStepAccumulator
from hetrl.replay.uniform import UniformReplay

GAMMA = 0.5


def _step(acc: NStepAccumulator, t: int, reward: float, terminated=False, truncated=False):
    """Env 0 steps from obs t to obs t+1 with action t."""
    return acc.push(np.array([[t]]), np.array([t]), np.array([reward]), np.array([[t + 1]]),
                    np.array([terminated]), np.array([truncated]))


def test_n_step_transitions_by_hand():
    acc = NStepAccumulator(n=3, gamma=GAMMA, n_envs=1)
    assert _step(acc, 0, 1.0) == () and _step(acc, 1, 2.0) == ()
    obs, actions, returns, next_obs, terminated, discounts = _step(acc, 2, 4.0)
    # s0 -> s3: 1 + 0.5·2 + 0.25·4 = 3, bootstrapped with 0.5^3
    assert (obs[0, 0], actions[0], next_obs[0, 0]) == (0, 0, 3)
    assert (returns[0], terminated[0], discounts[0]) == (3.0, 0.0, 0.125)
    # the episode terminates at s4: both open windows leave, with what they hold
    obs, _, returns, next_obs, terminated, discounts = _step(acc, 3, 8.0, terminated=True)
    assert obs[:, 0].tolist() == [1, 2, 3] and next_obs[:, 0].tolist() == [4, 4, 4]
    assert returns.tolist() == [2 + 2 + 2, 4 + 4, 8] and terminated.tolist() == [1, 1, 1]
    assert discounts.tolist() == [0.125, 0.25, 0.5]
    # a truncated episode leaves its windows to bootstrap (terminated stays 0)
    _step(acc, 10, 1.0)
    *_, terminated, discounts = _step(acc, 11, 1.0, truncated=True)
    assert terminated.tolist() == [0, 0] and discounts.tolist() == [0.25, 0.5]


def test_replay_keeps_one_window_per_stream_and_checkpoints_it():
    space = gym.spaces.Box(-100, 100, (1,))
    replay = UniformReplay(16, space, gym.spaces.Discrete(99), torch.device("cpu"), n_step=2,
                           gamma=GAMMA)
    for stream in (0, 1):  # two actors interleaved must not mix their windows
        replay.add(np.array([[stream * 10.0]]), np.array([0]), np.array([1.0]),
                   np.array([[stream * 10.0 + 1]]), np.array([0.0]), stream=stream)
    copy = UniformReplay(16, space, gym.spaces.Discrete(99), torch.device("cpu"), n_step=2,
                         gamma=GAMMA)
    copy.load_state_dict(replay.state_dict())
    for r in (replay, copy):
        for stream in (0, 1):
            r.add(np.array([[stream * 10.0 + 1]]), np.array([0]), np.array([1.0]),
                  np.array([[stream * 10.0 + 2]]), np.array([0.0]), stream=stream)
        assert len(r) == 2
        assert r.obs[:2, 0].tolist() == [0, 10] and r.next_obs[:2, 0].tolist() == [2, 12]
        assert r.rewards[:2].tolist() == [1.5, 1.5] and r.discounts[:2].tolist() == [0.25, 0.25]


def test_projection_by_hand():
    support = torch.tensor([0.0, 1.0, 2.0, 3.0])
    probs = torch.tensor([[0.5, 0.5, 0.0, 0.0]])
    # r + 0.5·z: atoms 0 and 1 land on 0.5 and 1.0 -> half of 0.5 to atoms 0 and 1, 0.5 to 1
    target = project(support, probs, torch.tensor([0.5]), torch.tensor([0.5]))
    assert torch.allclose(target, torch.tensor([[0.25, 0.75, 0.0, 0.0]]))
    # a terminal transition (discount 0) puts all mass at r, clamped to the support
    target = project(support, probs, torch.tensor([7.0]), torch.tensor([0.0]))
    assert torch.allclose(target, torch.tensor([[0.0, 0.0, 0.0, 1.0]]))


def test_d4pg_critic_fits_its_n_step_targets_on_dmc_cartpole(tmp_path):
    """A short run on DM Control's cartpole: the critic's cross-entropy falls as it trains."""
    result = run_job(tmp_path, "algo=d4pg", "env=dmc_cartpole_balance", "steps=700",
                     "algo.learning_starts=100", "algo.batch_size=32", "algo.hidden=[32]",
                     "algo.policy_hidden=[32]", "log_every=200", "algo.lr=1e-3",
                     "platform.measure_layers=false")
    losses = [v for _, v in metric_history(tmp_path, result["run_id"], "learner/critic_loss")]
    assert result["updates"] == 600 and result["episodes"] == 0  # DMC episodes: 1000 steps
    assert losses == sorted(losses, reverse=True) and losses[-1] < losses[0] - 0.1, losses


@pytest.mark.parametrize("env", ["dmc_walker_stand", "dmc_reacher_hard"])
def test_dmc_envs_give_flat_observations_and_step(env, tmp_path):
    result = run_job(tmp_path, "algo=ddpg", f"env={env}", "steps=120", "algo.learning_starts=100",
                     "algo.batch_size=8", "algo.hidden=[8]", "tracking=none",
                     "platform.measure_layers=false")
    assert result["updates"] == 20
