"""MADDPG and MATD3 on MPE through the same loop, tracking and checks as single-agent runs:
every phase is timed, mismatched choices are named, the issue's sweep lands as one MLflow
sweep, optimized samplers get a reward error against uniform, and MADDPG learns."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import (NOT_MEASURED, compose_job, hetrl_cli, metric_history, mlflow_runs, run_job,
                     tracking_uri)
from mlflow.tracking import MlflowClient

from hetrl.algos.base import Batch, clip_slices_
from hetrl.algos.ensemble import NARROW, by_shape, stacked_mlp
from hetrl.algos.maddpg import MADDPG, gumbel_softmax
from hetrl.algos.matd3 import MATD3
from hetrl.algos.networks import mlp
from hetrl.compiled.step import GraphStep
from hetrl.config.errors import ConfigError
from hetrl.envs.mpe import MpeVectorEnv
from hetrl.platform.measure import random_batch
from hetrl.tracking.reward_error import reference_job
from hetrl.validation import validate

TINY = ("steps=300", "algo.learning_starts=100", "algo.batch_size=32", "algo.train_freq=50",
        "algo.hidden=[16]", "log_every=100")
PHASES = {"act", "env", "replay_add", "sample", "update", "target_q", "q_loss", "p_loss",
          "target_update"}


def test_matd3_with_prioritized_locality_times_every_phase(tmp_path):
    result = run_job(tmp_path, "tracking=none", *TINY, "algo=matd3", "env=simple_tag",
                     "replay=joint", "replay/sampler=prioritized_locality")
    phases = {k.removeprefix("phase/").removesuffix("_s") for k in result
              if k.startswith("phase/") and k.endswith("_s")}
    assert phases == PHASES | {"priority_update"}
    # 4 updates (at 150, 200, 250, 300 steps), each training all 4 trainers (3 predators and
    # 1 prey) at once
    assert result["updates"] == 4
    inner = sum(result[f"phase/{p}_s"] for p in ("target_q", "q_loss", "p_loss", "target_update"))
    assert 0 < inner <= result["phase/update_s"]


@pytest.mark.parametrize(("overrides", "named"), [
    (("algo=dqn", "env=simple_tag"), ["algo=dqn", "single-agent", "env=simple_tag",
                                      "['maddpg', 'matd3']", "['acrobot', 'breakout', 'cartpole', 'mountaincar', 'mspacman', 'pong']"]),
    (("algo=maddpg", "env=cartpole"), ["algo=maddpg", "multi-agent", "env=cartpole",
                                       "['simple_spread', 'simple_tag']"]),
    (("algo=maddpg", "replay=uniform"), ["replay=uniform", "['joint', 'per_agent', 'per_agent_lists']"]),
    (("algo=maddpg", "replay/sampler=locality", "replay.sampler.refs=8"),
     ["replay.sampler.refs=8", "algo.batch_size (1024)"]),
    (("algo=matd3", "platform=versal"), ["algo=matd3", "platform=versal", "platform=host"]),
    # ActorQ's actors step gymnasium vector envs, and its learner would not find MADDPG's policy
    (("algo=maddpg", "scheduler=actorq"), ["scheduler=actorq", "multi-agent",
                                           "env=simple_spread", "['sync']"]),
])
def test_mismatched_choices_are_named_with_the_valid_ones(overrides, named):
    cfg, choices = compose_job(*overrides)
    with pytest.raises(ConfigError) as err:
        validate(cfg, choices)
    assert all(part in str(err.value) for part in named), str(err.value)


def test_entity_counts_follow_the_agent_count():
    """3 predators: 1 prey, 2 obstacles; 24: 8 and 8 (the paper's Box(98)/Box(96))."""
    envs = MpeVectorEnv("simple_tag_v3", n_agents=24)
    assert envs.n_agents == 32 and envs.obs_dims[0] == 98 and envs.obs_dims[-1] == 96
    assert MpeVectorEnv("simple_spread_v3", n_agents=6).obs_dims == [36] * 6


def test_the_issue_sweep_lands_as_one_mlflow_sweep(tmp_path):
    """The done-when command, on a tiny budget (one update round per job) and without the
    final greedy evaluation: 24-agent simple_tag steps take tens of ms each."""
    out = hetrl_cli(tmp_path, "-m", "algo=maddpg,matd3", "env=simple_tag", "env.n_agents=3,24",
                    "replay=per_agent,joint", "steps=20", "algo.learning_starts=10",
                    "algo.batch_size=8", "algo.train_freq=10", "algo.hidden=[8]", "log_every=10",
                    "eval.final=0")
    assert out.returncode == 0, out.stderr[-3000:]
    runs = mlflow_runs(tmp_path)
    (parent,) = [r for r in runs if r.data.tags.get("sweep") == "true"]
    jobs = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(jobs) == 8 and all(r.info.status == "FINISHED" for r in jobs)
    assert {r.data.params["env.n_agents"] for r in jobs} == {"3", "24"}
    assert all(r.data.params["env.returns"] == "team_sum" for r in jobs)
    assert all(r.data.metrics["phase/sample_pct"] > 0 for r in jobs)
    summary = MlflowClient(tracking_uri(tmp_path)).download_artifacts(
        parent.info.run_id, "summary.md", str(tmp_path))
    assert "| env.n_agents |" in open(summary).read()  # swept keys are summary columns


def test_optimized_samplers_get_a_reward_error_against_uniform(tmp_path):
    job = ("algo=maddpg", *TINY, "replay=joint")
    locality = run_job(tmp_path, *job, "replay/sampler=locality", "replay.sampler.refs=4",
                       "replay.sampler.neighbors=8")
    runs = mlflow_runs(tmp_path)
    (uniform,) = [r for r in runs if r.data.params["replay.sampler._target_"].endswith(".UniformSampler")]
    assert len(runs) == 2  # the uniform reference was trained for it
    reference = uniform.data.metrics["return_mean_100"]
    assert locality["reward_error_pct"] == pytest.approx(
        abs(locality["return_mean_100"] - reference) / abs(reference) * 100)
    run_job(tmp_path, *job, "replay/sampler=prioritized")
    assert len(mlflow_runs(tmp_path)) == 3  # and reused
    assert reference_job(*compose_job(*job)) is None  # uniform fp32 is its own reference


CI_BUDGET = ("steps=25000", "algo.learning_starts=2500", "algo.train_freq=20")
"""A CI-sized budget in which 3 agents learn: updates every 20 env steps from 2,500 stored
transitions (the paper's cadence, algo=maddpg's own: every 100 from 25,600, over 1.5M steps)."""


@pytest.mark.slow
def test_maddpg_beats_a_random_team_on_simple_spread(tmp_path):
    """MADDPG, 3 agents, within CI_BUDGET: the team starts no better than random and ends
    (at the first log past the bar) 10 better than random's mean."""
    envs = MpeVectorEnv("simple_spread_v3", n_agents=3)
    envs.reset(seed=0)
    envs.action_space.seed(0)
    random_returns: list[float] = []
    while len(random_returns) < 100:
        info = envs.step(envs.action_space.sample())[-1]
        if info:
            random_returns.append(float(info["episode"]["r"][0]))
    bar = float(np.mean(random_returns)) + 10
    result = run_job(tmp_path, "algo=maddpg", "env=simple_spread", *CI_BUDGET,
                     f"stop_return={bar}", *NOT_MEASURED)
    curve = metric_history(tmp_path, result["run_id"], "return_mean_100")
    assert curve[0][1] < bar  # it starts unsolved
    assert result["return_mean_100"] >= bar, curve


def _unequal_agents(algo: type[MADDPG], **extra) -> tuple[MADDPG, list[Batch]]:
    """A small learner of simple_tag's kind: two agents of one shape (6 features, 5 moves)
    and one of another (4 features, zero-padded to 6, and 3 moves); batches of its shapes."""
    high = np.ones((3, 6), dtype=np.float32)
    high[2, 4:] = 0  # the padding has bounds [0, 0]
    obs_space = gym.spaces.Box(-high, high)
    act_space = gym.spaces.MultiDiscrete([5, 5, 3])
    learner = algo(obs_space, act_space, tau=0.1, max_grad_norm=0.5, policy_reg=1e-3,
                   batch_size=8, buffer_size=64, learning_starts=0, train_freq=1,
                   gradient_steps=1, device=torch.device("cpu"), hidden=[16], lr=0.01,
                   gamma=0.95, policy_hidden=None, **extra)
    batches = [random_batch(learner, obs_space, act_space, learner.batch_size, learner.device,
                            seed=seed) for seed in range(2)]
    return learner, batches


def test_a_stacked_mlp_is_its_networks_run_each_on_its_own_input():
    """Slice k of a stacked MLP is an nn.Linear MLP of its own: the same outputs on its own
    input (any dimensions between the networks' and the features), its gradient alone, and
    its gradient norm clipped on its own as torch clips one network's."""
    torch.manual_seed(0)
    stacked = stacked_mlp(3, [4, 8, 2])
    nets = [mlp([4, 8, 2]) for _ in range(3)]
    for k, net in enumerate(nets):
        for layer, linear in zip(stacked, net):
            if isinstance(linear, torch.nn.Linear):
                linear.load_state_dict({"weight": layer.weight[k], "bias": layer.bias[k]})
    for x in (torch.randn(3, 5, 4), torch.randn(3, 2, 5, 4)):
        assert torch.allclose(stacked(x), torch.stack([net(x[k]) for k, net in enumerate(nets)]),
                              atol=1e-6)
    x = torch.randn(3, 5, 4) * torch.tensor([0.01, 10.0, 100.0])[:, None, None]
    stacked(x).pow(2).sum().backward()
    for net, xk in zip(nets, x):
        net(xk).pow(2).sum().backward()
    clip_slices_(list(stacked.parameters()), max_norm=1.0)
    for net in nets:
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    for k, net in enumerate(nets):
        for layer, linear in zip(stacked, net):
            if isinstance(linear, torch.nn.Linear):
                assert torch.allclose(layer.weight.grad[k], linear.weight.grad, atol=1e-6)
                assert torch.allclose(layer.bias.grad[k], linear.bias.grad, atol=1e-6)
    norms = [torch.cat([p.grad.flatten() for p in net.parameters()]).norm() for net in nets]
    assert norms[0] < 1.0 and torch.allclose(torch.stack(norms[1:]), torch.ones(2))
    assert by_shape([(6, 5), (6, 5), (4, 3), (6, 5)]) == [[0, 1, 3], [2]]


def test_a_compiled_stacked_mlp_computes_its_narrow_heads_as_eager_does():
    """Compiled, a head at most NARROW wide is a multiply-sum, not a batched GEMM: the same
    outputs and gradients as eager's."""
    torch.manual_seed(0)
    stacked = stacked_mlp(3, [4, NARROW + 1, NARROW])
    x = torch.randn(3, 2, 5, 4)

    def outputs_and_grads(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = stacked(x)
        return (y, *torch.autograd.grad(y.pow(2).sum(), list(stacked.parameters())))

    for eager, compiled in zip(outputs_and_grads(x), torch.compile(outputs_and_grads)(x)):
        assert torch.allclose(eager, compiled, atol=1e-5)


@pytest.mark.parametrize("algo, extra", [
    (MADDPG, {}), (MATD3, {"policy_delay": 2, "target_noise": 0.2, "target_noise_clip": 0.5})])
def test_one_update_trains_every_trainer_on_its_own_rows(algo, extra):
    """One update moves every agent's networks (a trainer each, on its own 8 rows of the
    24), agents of unequal shapes included, the same eager and through the functional
    update; trainer 0's gradient reads its own rows only."""
    learner, batches = _unequal_agents(algo, **extra)
    assert learner.batch_size == 3 * 8 and learner.actor_groups == [[0, 1], [2]]
    eager, functional = copy.deepcopy(learner), copy.deepcopy(learner)
    functional.compiled_step = GraphStep(functional, None)
    for u in range(4):
        for trained in (eager, functional):
            torch.manual_seed(u)
            trained.learn(batches[u % 2])
    before, after = learner.state_dict(), eager.state_dict()
    for name in ("actors.0", "actors.1", "critics", "actor_targets.0", "actor_targets.1",
                 "critic_targets"):
        for was, now in zip(before[f"{name}.0.weight"], after[f"{name}.0.weight"]):
            assert not torch.equal(was, now)  # every agent's network, of each stack
    assert max((a - b).abs().max().item() for a, b in zip(after.values(),
                                                          functional.state_dict().values())
               if a.is_floating_point()) < 1e-5

    def first_critic_grads(batch: Batch) -> list[torch.Tensor]:
        torch.manual_seed(0)
        loss, _ = learner.critic_loss(batch, 0)
        return torch.autograd.grad(loss, learner.critics[0].weight)[0][:2]  # trainers 0, 1

    batch = batches[0]
    others = batch._replace(rewards=torch.cat([batch.rewards[:8], batch.rewards[8:] + 1.0]))
    own_grads, other_grads = first_critic_grads(batch), first_critic_grads(others)
    assert torch.equal(own_grads[0], other_grads[0])  # rows 8-23 are the other trainers'
    assert not torch.equal(own_grads[1], other_grads[1])


def test_the_gumbel_softmax_samples_each_move_by_its_softmax_probability():
    torch.manual_seed(0)
    logits = torch.tensor([0.0, 1.0, 2.0, -1.0]).expand(200_000, 4)
    soft = gumbel_softmax(logits)
    assert torch.allclose(soft.sum(-1), torch.ones(len(soft)))
    chosen = torch.bincount(soft.argmax(-1), minlength=4) / len(soft)
    assert torch.allclose(chosen, logits[0].softmax(0), atol=0.005)
