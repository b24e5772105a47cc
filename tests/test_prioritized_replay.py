"""`replay=prioritized` (spec T10, issue 12 item 1): PER over the F-ary sum tree on the
uniform ring's storage; new transitions at the running max priority, β annealed to 1,
importance weights over their max; every single-agent off-policy learner weighs its TD loss
by them and hands back TD errors; validation names the algos it does not fit. DQN learns
CartPole with it in test_pearl_runtime.py, under scheduler=pearl, whose default replay it is."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import build_job, compose_job, run_job

from hetrl.algos.base import Batch
from hetrl.config.errors import ConfigError
from hetrl.replay.prioritized import PrioritizedReplay
from hetrl.validation import validate

OBS = gym.spaces.Box(-10, 10, (3,))
PER = dict(n_step=1, gamma=0.99, fanout=16, alpha=0.6, beta=0.4, beta_final=1.0, beta_anneal=50,
           eps=0.01)


def _filled(capacity: int, n: int, **per) -> PrioritizedReplay:
    replay = PrioritizedReplay(capacity, OBS, gym.spaces.Discrete(4), torch.device("cpu"),
                               **{**PER, **per})
    for i in range(0, n, 4):  # 4 envs a step; obs carries its insertion number
        ids = np.arange(i, i + 4, dtype=np.float32)
        obs = np.repeat(ids[:, None], 3, axis=1)
        replay.add(obs, ids.astype(np.int64) % 4, ids, obs + 0.5, ids % 2)
    return replay


def test_batches_are_stored_rows_with_their_slots_and_weights():
    replay = _filled(64, 40)
    batch = replay.sample(32)
    assert batch.indices.shape == (32,) and batch.weights.shape == (32,)
    assert torch.equal(batch.obs[:, 0], torch.from_numpy(replay.obs[batch.indices, 0]))
    assert torch.equal(batch.obs[:, 0], batch.rewards) and batch.obs[:, 0].max() < 40
    assert batch.discounts is not None and replay.tree.fanout == 16


def test_new_transitions_enter_at_the_running_max_priority():
    replay = _filled(64, 16, alpha=0.5)
    p = replay.sampler.priority
    assert np.all(p[:16] == 1.0) and not p[16:].any()  # the initial max: 1
    replay.update_priorities(np.array([3, 5]), torch.tensor([2.99, -0.5]))
    assert p[3] == pytest.approx(3.0) and p[5] == pytest.approx(0.51)  # |δ| + ε
    replay.update_priorities(np.array([3]), torch.tensor([0.0]))  # the max stays 3
    replay.add(np.zeros((2, 3)), np.zeros(2, np.int64), np.zeros(2), np.zeros((2, 3)), np.zeros(2))
    assert p[16:18] == pytest.approx([3.0, 3.0]) and p[16] == p.max()
    assert replay.tree.get(np.array([16, 5])) == pytest.approx([3.0**0.5, 0.51**0.5])  # p^α
    before = p.copy()  # PEARL's collision check can drop every row of a batch: no update
    replay.update_priorities(np.array([], np.int64), torch.zeros(0))
    assert np.array_equal(p, before) and replay.sampler.max_priority == pytest.approx(3.0)


def test_beta_anneals_to_one_and_weights_are_normalized_by_their_max():
    replay = _filled(64, 64, alpha=1.0, eps=1e-9, beta_anneal=10)
    replay.update_priorities(np.arange(64), torch.arange(1, 65, dtype=torch.float32))
    betas = []
    for _ in range(15):
        betas.append(replay.sampler.beta)
        batch = replay.sample(16)
        prob = (batch.indices + 1) / (64 * 65 / 2)  # P(i) = p_i / Σp at α = 1
        expected = (64 * prob) ** -betas[-1]
        assert batch.weights.numpy() == pytest.approx(expected / expected.max(), rel=1e-5)
        assert batch.weights.max() == 1.0
    assert betas[0] == pytest.approx(0.4) and betas[5] == pytest.approx(0.7)
    assert betas[10:] == [1.0] * 5


def test_state_round_trip_resumes_the_same_batches():
    replay = _filled(32, 48)
    replay.update_priorities(np.arange(32), torch.rand(32))
    copy_ = PrioritizedReplay(32, OBS, gym.spaces.Discrete(4), torch.device("cpu"), **PER)
    copy_.load_state_dict(replay.state_dict())
    np.random.seed(5)
    a = replay.sample(16)
    np.random.seed(5)
    b = copy_.sample(16)
    assert np.array_equal(a.indices, b.indices) and torch.equal(a.weights, b.weights)
    assert np.array_equal(copy_.tree.tree, replay.tree.tree)


# ---- learners ---------------------------------------------------------------------------

ALGOS = {"dqn": "cartpole", "ddpg": "pendulum", "td3": "pendulum", "d4pg": "pendulum"}
CRITIC = {"dqn": "q", "ddpg": "critic", "td3": "critic", "d4pg": "critic"}


def _learner_and_batch(algo: str, n: int = 8) -> tuple[torch.nn.Module, Batch]:
    job = build_job(f"algo={algo}", f"env={ALGOS[algo]}", "algo.hidden=[16]", "device=cpu")
    job.envs.close()
    learner, spaces = job.learner, job.spaces
    torch.manual_seed(0)
    obs = torch.randn(n, *spaces["obs_space"].shape)
    actions = (torch.randint(0, 2, (n,)) if algo == "dqn"
               else torch.rand(n, *spaces["act_space"].shape) * 4 - 2)
    batch = Batch(obs, actions, torch.randn(n), obs + 0.1 * torch.randn_like(obs),
                  (torch.rand(n) < 0.2).float())
    return learner, batch


@pytest.mark.parametrize("algo", ALGOS)
def test_each_learner_weighs_its_td_loss_by_the_importance_weights(algo):
    """All the weight on row 0 (B times it, the rest 0): the critic takes the step a batch
    of row 0 alone gives; the TD errors come back only for a prioritized batch."""
    learner, batch = _learner_and_batch(algo)
    weighted, alone = learner, copy.deepcopy(learner)
    weights = torch.zeros(len(batch.obs))
    weights[0] = len(batch.obs)
    metrics = weighted.update(batch._replace(indices=np.arange(8), weights=weights))
    plain = alone.update(Batch(*(column[:1] for column in batch[:5])))
    for a, b in zip(getattr(weighted, CRITIC[algo]).parameters(),
                    getattr(alone, CRITIC[algo]).parameters()):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
    assert metrics["td_errors"].shape == (8,) and "td_errors" not in plain
    assert not metrics["td_errors"].requires_grad


@pytest.mark.slow
@pytest.mark.parametrize("algo", ALGOS)
def test_each_learner_trains_with_replay_prioritized(algo, tmp_path):
    result = run_job(tmp_path, f"algo={algo}", f"env={ALGOS[algo]}", "replay=prioritized",
                     "steps=300", "log_every=150", "algo.learning_starts=100",
                     "algo.batch_size=16", "algo.hidden=[16]", "algo.train_freq=4",
                     "algo.gradient_steps=1", "algo.policy_hidden=null")
    assert result["updates"] > 0 and result["phase/priority_update_s"] > 0


@pytest.mark.parametrize(("overrides", "named"), [
    (("algo=ppo", "replay=prioritized"), ["replay=prioritized", "algo=ppo", "on-policy",
                                          "['uniform']", "['dqn']"]),
    (("algo=a2c", "env=pendulum", "replay=prioritized"),
     ["algo=a2c", "['d4pg', 'ddpg', 'td3']"]),
    (("algo=maddpg", "replay=prioritized"), ["replay=prioritized", "single-agent",
                                             "['joint', 'per_agent', 'per_agent_lists']"]),
    (("algo=dqn", "replay=prioritized", "replay.fanout=1"), ["replay.fanout=1"]),
])
def test_prioritized_with_an_algo_it_does_not_fit_is_named(overrides, named):
    cfg, choices = compose_job(*overrides)
    with pytest.raises(ConfigError) as err:
        validate(cfg, choices)
    assert all(part in str(err.value) for part in named), str(err.value)
