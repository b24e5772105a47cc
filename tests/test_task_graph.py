"""Task graphs of one training step, built from the real modules (spec Part C, T7)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from functools import cache
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import build_job
from torch import nn

from hetrl.algos.alphazero import AlphaZero
from hetrl.algos.networks import Actor, QCritic, frozen_copy, mlp, nature_cnn
from hetrl.algos.rule import stage_loss
from hetrl.partition.builder import mlp_input_shape
from hetrl.partition.flops import PAPER_KINDS, kind_of, per_sample_flops
from hetrl.partition.graph import Kind, Pass, TaskGraph
from hetrl.partition.steps import actor_critic_step_graph, dqn_step_graph

BATCH = 32


@cache
def breakout(batch: int) -> TaskGraph:
    """The graph of the DQN learner a job builds for env=breakout: the Nature CNN on frames
    (built once per batch size; the tests only read it)."""
    c = build_job("algo=dqn", "env=breakout", f"algo.batch_size={batch}")
    c.envs.close()
    return c.learner.task_graph(batch)


def cartpole(batch: int, double_dqn: bool = False) -> TaskGraph:
    q = mlp([4, 64, 64, 2])
    return dqn_step_graph(q, frozen_copy(q), batch, (4,), double_dqn=double_dqn)


def ddpg(obs_dim: int, act_dim: int, twin: bool = False) -> Callable[[int], TaskGraph]:
    """A DDPG (or TD3) step graph factory with AP-DRL's 400-300 hidden layers."""
    def build(batch: int) -> TaskGraph:
        action_space = gym.spaces.Box(-1.0, 1.0, (act_dim,), np.float32)
        actor = Actor(obs_dim, [400, 300], action_space)
        names = ["critic", "critic2"] if twin else ["critic"]
        critics = {}
        for name in names:
            critic = QCritic(obs_dim, act_dim, [400, 300])
            critics[name] = (critic, frozen_copy(critic))
        return actor_critic_step_graph(batch, (obs_dim,), actor, frozen_copy(actor), critics)
    return build


def alphazero(batch: int, width: int = 16, blocks: int = 2, n: int = 5) -> TaskGraph:
    """The step graph of an AlphaZero learner on an n x n board (env=go*'s 12 planes)."""
    return AlphaZero(obs_space=gym.spaces.Box(0.0, 1.0, (12, n, n), np.float32),
                     act_space=gym.spaces.Discrete(n * n + 1), device=torch.device("cpu"),
                     width=width, blocks=blocks, batch_size=batch, lr_values=[0.01],
                     lr_boundaries=[], momentum=0.9, l2=1e-4, value_weight=0.5,
                     search={}).task_graph(batch)


def paper_nodes(graph: TaskGraph) -> list:
    return [n for n in graph.nodes if n.kind in PAPER_KINDS]


def test_breakout_graph_counts_like_the_paper():
    graph = breakout(BATCH)
    nodes = paper_nodes(graph)
    assert Counter((n.network, n.pass_) for n in nodes) == {
        ("q", Pass.forward): 5, ("q_target", Pass.forward): 5, ("q", Pass.backward): 5}
    smallest = min(nodes, key=lambda n: n.flops)
    largest = max(nodes, key=lambda n: n.flops)
    assert (smallest.name, smallest.flops / BATCH) == ("q/10.forward", 4100)  # 0: ScaleImage
    assert largest.name == "q/3.backward" and 10.61e6 <= largest.flops / BATCH <= 10.63e6
    assert per_sample_flops(graph, BATCH, PAPER_KINDS) == pytest.approx(68.17e6, rel=0.005)


def test_breakout_graph_keeps_activation_loss_and_update_nodes_apart():
    graph = breakout(BATCH)
    kinds = Counter(n.kind for n in graph.nodes)
    assert kinds == {Kind.matmul: 15, Kind.elementwise: 12, Kind.loss: 1, Kind.optimizer: 5}
    assert per_sample_flops(graph, BATCH) > per_sample_flops(graph, BATCH, PAPER_KINDS)
    assert [n.name for n in graph.nodes[:2]] == ["q/1.forward", "q/2.forward"]
    (edge,) = [e for e in graph.edges if (e.src, e.dst) == (0, 1)]
    assert edge.bytes == BATCH * 32 * 20 * 20 * 4  # Conv1's real output, float32


@pytest.mark.parametrize(("build", "paper"), [
    (cartpole, 28.04e3), (ddpg(8, 2), 2.25e6), (ddpg(2, 1), 2.19e6),
], ids=["CartPole-DQN", "LunarCont-DDPG", "MntnCarCont-DDPG"])
def test_mlp_rows_are_within_30_percent_of_table_iii(build, paper):
    # every weight-layer pass of the step, target forwards included (steps.py says why)
    assert per_sample_flops(build(BATCH), BATCH, PAPER_KINDS) == pytest.approx(paper, rel=0.30)


@pytest.mark.parametrize("algo", ["ddpg", "td3", "d4pg"])
def test_the_actor_loss_runs_through_a_frozen_critic_as_the_graph_counts(algo):
    c = build_job(f"algo={algo}", "env=pendulum", "algo.hidden=[16]", "tracking=none")
    c.envs.close()
    learner = c.learner
    actor_stage = learner.stages()[-1]  # as the eager update runs it
    loss, _ = stage_loss(learner, actor_stage, SimpleNamespace(obs=torch.randn(8, 3)), 0)
    loss.backward()
    assert all(p.grad is not None for p in learner.actor.parameters())
    assert all(p.grad is None and p.requires_grad for p in learner.critic.parameters())
    flops: dict[str, list[float]] = {}  # each critic layer's backward: critic step, actor step
    for node in learner.task_graph(BATCH).nodes:
        if (node.network, node.pass_, node.kind) == ("critic", Pass.backward, Kind.matmul):
            flops.setdefault(node.layer, []).append(node.flops)
    layers = [module for module in learner.critic.modules() if isinstance(module, nn.Linear)]
    assert len(flops) == len(layers)
    for (critic_step, actor_step), layer in zip(reversed(flops.values()), layers):
        assert actor_step == 2 * BATCH * layer.in_features * layer.out_features < critic_step


GRAPHS = {"alphazero": alphazero, "breakout": breakout, "cartpole": cartpole,
          "double-dqn": lambda b: cartpole(b, double_dqn=True),
          "ddpg": ddpg(8, 2), "td3": ddpg(3, 1, twin=True)}


@pytest.mark.parametrize("build", GRAPHS.values(), ids=GRAPHS.keys())
def test_the_step_is_a_dag_whose_every_node_feeds_an_update(build):
    graph = build(BATCH)
    order = graph.topological_order()
    position = {i: k for k, i in enumerate(order)}
    names = {n.name: i for i, n in enumerate(graph.nodes)}
    assert len(names) == len(graph.nodes)

    reaches_update = {i for i, n in enumerate(graph.nodes) if n.pass_ is Pass.update}
    for i in reversed(order):
        if any(j in reaches_update for j in graph.succs(i)):
            reaches_update.add(i)
    assert reaches_update == set(range(len(graph.nodes)))  # every pass feeds some update

    for i, node in enumerate(graph.nodes):
        if node.pass_ is Pass.backward:
            forward = names[node.name.replace(".backward", ".forward")]
            assert position[forward] < position[i]


@pytest.mark.parametrize("build", GRAPHS.values(), ids=GRAPHS.keys())
def test_flops_scale_with_the_batch_and_updates_do_not(build):
    small, large = build(BATCH), build(2 * BATCH)
    for a, b in zip(small.nodes, large.nodes, strict=True):
        factor = 1 if a.pass_ is Pass.update else 2
        assert (a.name, b.flops, b.bytes_in) == (b.name, factor * a.flops, factor * a.bytes_in)


# forward passes of each network in one step (critic: critic loss and actor loss)
PASSES = {
    "dqn": {"q": 1, "q_target": 1},
    "ddpg": {"actor": 1, "actor_target": 1, "critic": 2, "critic_target": 1},
    "td3": {"actor": 1, "actor_target": 1, "critic": 2, "critic_target": 1,
            "critic2": 1, "critic2_target": 1},
}


@pytest.mark.parametrize("algo", PASSES)
def test_the_learners_graph_has_a_node_per_real_layer_pass(algo):
    learner = build_job(f"algo={algo}").learner
    graph = learner.task_graph(BATCH)
    forwards = Counter(n.network for n in graph.nodes
                       if n.pass_ is Pass.forward and n.kind is not Kind.loss)
    updates = Counter(n.network for n in graph.nodes if n.pass_ is Pass.update)
    for network, passes in PASSES[algo].items():
        leaves = [m for m in getattr(learner, network).modules()
                  if not any(m.children()) and kind_of(m) is not None]
        assert forwards[network] == passes * len(leaves)
        trained = not network.endswith("_target")
        weights = sum(isinstance(m, nn.Linear) for m in leaves)
        assert updates[network] == (weights if trained else 0)


def test_double_dqn_runs_the_online_network_on_next_obs_too():
    graph = cartpole(BATCH, double_dqn=True)
    assert Counter(n.network for n in paper_nodes(graph) if n.pass_ is Pass.forward) == {
        "q": 6, "q_target": 3}


def test_layers_without_a_flop_rule_and_conv_inputs_are_named():
    with pytest.raises(TypeError, match="LayerNorm.*supported: Linear"):
        kind_of(nn.LayerNorm(4))
    with pytest.raises(ValueError, match="Conv2d.*obs_shape"):
        mlp_input_shape(nature_cnn(4))


def test_the_alphazero_step_follows_the_residual_tower_and_both_heads():
    width, n = 16, 5
    graph = alphazero(BATCH, width=width, n=n)
    names = {node.name: i for i, node in enumerate(graph.nodes)}
    into = {i: {graph.nodes[e.src].name for e in graph.edges if e.dst == i}
            for i in range(len(graph.nodes))}
    # conv3x3: 2 k^2 Cin Cout H W per sample, forward; weight and input gradients backward
    conv = graph.nodes[names["net/trunk.1.conv2.forward"]]
    assert conv.flops == 2 * 3 * 3 * width * width * n * n * BATCH
    assert graph.nodes[names["net/trunk.1.conv2.backward"]].flops == 2 * conv.flops
    assert graph.nodes[names["net/stem.0.backward"]].flops == (  # no input gradient
        graph.nodes[names["net/stem.0.forward"]].flops)
    # the skips: a block's input also feeds its last ReLU, and gets its gradient back
    assert into[names["net/trunk.0.relu2.forward"]] == {"net/trunk.0.bn2.forward",
                                                         "net/stem.2.forward"}
    assert into[names["net/trunk.1.relu2.forward"]] >= {"net/trunk.0.relu2.forward"}
    assert {"net/trunk.0.conv1.backward", "net/trunk.0.relu2.backward"} <= into[
        names["net/stem.2.backward"]]
    # both heads read the tower, and the tower's backward starts from both
    for head in ("policy", "value"):
        assert "net/trunk.1.relu2.forward" in into[names[f"net/{head}_conv.0.forward"]]
        assert "loss" in into[names[f"net/{head}_fc.backward" if head == "policy"
                                    else "net/value_fc.3.backward"]]
    assert {"net/policy_conv.0.backward", "net/value_conv.0.backward"} <= into[
        names["net/trunk.1.relu2.backward"]]
    # an SGD-with-momentum update for each layer with parameters: BN's scale and shift too
    updates = [node for node in graph.nodes if node.pass_ is Pass.update]
    assert len(updates) == 2 + 4 * 2 + 2 + 1 + 2 + 2
    bn = graph.nodes[names["net/trunk.0.bn1.update"]]
    assert (bn.flops, bn.bytes_in) == (4 * 2 * width, 2 * 2 * width * 4)


def test_planning_an_alphazero_step_leaves_its_batch_norm_statistics_alone():
    learner = AlphaZero(obs_space=gym.spaces.Box(0.0, 1.0, (12, 5, 5), np.float32),
                        act_space=gym.spaces.Discrete(26), device=torch.device("cpu"),
                        width=8, blocks=1, batch_size=8, lr_values=[0.01], lr_boundaries=[],
                        momentum=0.9, l2=1e-4, value_weight=0.5, search={})
    before = {k: v.clone() for k, v in learner.net.state_dict().items()}
    learner.task_graph(8)
    assert learner.net.training
    assert all(v.equal(before[k]) for k, v in learner.net.state_dict().items())
