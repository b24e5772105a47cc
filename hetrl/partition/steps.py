"""The training step of each algorithm as a task graph, pass for pass as its `update` runs.

What counts against Table III (spec §A.6): we count every weight-layer pass the step really
runs (`flops.PAPER_KINDS`), target forwards included. That matches DQN-Breakout to 0.15 % and
overshoots the MLP rows by +10 % (DDPG) to +27 % (DQN-CartPole): the paper seems to leave out
target forwards there. One convention for all rows rather than one per row.

Target-network syncs (DQN's periodic copy, Polyak averaging) are not nodes.
"""

from __future__ import annotations

from torch import nn

from hetrl.partition.builder import StepGraph
from hetrl.partition.flops import SGD_MOMENTUM
from hetrl.partition.graph import TaskGraph


def dqn_step_graph(q: nn.Module, q_target: nn.Module, batch_size: int, obs_shape: tuple[int, ...],
                   *, double_dqn: bool = False) -> TaskGraph:
    """Online forward on obs, target forward on next_obs (plus the online one for double DQN),
    the TD loss, backward through the online network and its per-layer updates."""
    step = StepGraph(batch_size)
    q_obs = step.forward("q", q, obs_shape)
    next_values = [step.forward("q_target", q_target, obs_shape)]
    if double_dqn:
        next_values.append(step.forward("q", q, obs_shape))
    loss = step.loss("td_loss", q_obs, *next_values)
    step.backward(q_obs, loss)
    step.update(q_obs)
    return step.graph


def actor_critic_step_graph(batch_size: int, obs_shape: tuple[int, ...], actor: nn.Module,
                            actor_target: nn.Module,
                            critics: dict[str, tuple[nn.Module, nn.Module]]) -> TaskGraph:
    """DDPG (one critic) or TD3 (twin critics), `critics` mapping name -> (critic, target).

    Critic step: actor target and critic targets on next_obs, critics on (obs, action), the
    critic loss, backward and update of every critic. Actor step: actor on obs, the first
    critic (already updated) on its actions, the actor loss, backward through that critic
    (frozen: its input gradient only) into the actor, and the actor's update. TD3 runs the
    actor step every `policy_delay` steps; this graph is a step that runs it (the longest one).
    """
    step = StepGraph(batch_size)
    next_actions = step.forward("actor_target", actor_target, obs_shape)
    targets = [step.forward(f"{name}_target", target, obs_shape, next_actions)
               for name, (_, target) in critics.items()]
    values = [step.forward(name, critic, obs_shape, next_actions.out_shape)
              for name, (critic, _) in critics.items()]
    critic_loss = step.loss("critic_loss", *values, *targets)
    for value in values:
        step.backward(value, critic_loss)
        step.update(value)

    actions = step.forward("actor", actor, obs_shape)
    name, (critic, _) = next(iter(critics.items()))
    policy_value = step.forward(name, critic, obs_shape, actions)
    actor_loss = step.loss("actor_loss", policy_value)
    action_grad = step.backward(policy_value, actor_loss, input_grad=True, weight_grads=False)
    step.backward(actions, action_grad)
    step.update(actions)
    return step.graph


def policy_gradient_step_graph(batch_size: int, obs_shape: tuple[int, ...], actor: nn.Module,
                               critic: nn.Module) -> TaskGraph:
    """A2C or PPO on one (mini)batch: actor and critic forward on obs, one loss (policy,
    value and entropy terms summed), backward through both networks and their updates.
    The rollout's values and the Gaussian's state-independent log-std are not nodes."""
    step = StepGraph(batch_size)
    policy = step.forward("actor", actor, obs_shape)
    value = step.forward("critic", critic, obs_shape)
    loss = step.loss("loss", policy, value)
    for fwd in (policy, value):
        step.backward(fwd, loss)
        step.update(fwd)
    return step.graph


def policy_value_step_graph(net: nn.Module, batch_size: int,
                            obs_shape: tuple[int, ...], network: str = "net") -> TaskGraph:
    """AlphaZero's step (MiniGo's MLPerf loss, momentum SGD) on a residual policy/value
    network (`hetrl.algos.alphazero.PolicyValueNet`: `stem`, the residual blocks of `trunk`,
    `policy_conv` → `policy_fc` and `value_conv` → `value_fc`), which is not one chain: each
    block adds its input back before its last ReLU (a skip edge), and both heads read the
    tower's output, so the tower's backward starts from both heads' input gradients.

    Forward: stem, the blocks, each head (its conv, then its FC on the flattened output);
    the loss reads both heads (policy cross-entropy, value MSE; the L2 term is not a node);
    backward: each head, then the blocks from the last, then the stem (no input gradient);
    an SGD-with-momentum update for every layer with parameters (convs, BN scale and shift,
    FCs). The random board symmetry of each row is not a node."""
    step = StepGraph(batch_size, optimizer=SGD_MOMENTUM)
    stem = step.forward(network, net.stem, obs_shape, path="stem")
    x, blocks = stem, []
    for k, block in enumerate(net.trunk):
        out = step.forward(network, block, x, path=f"trunk.{k}")
        step.residual(x, out)
        blocks.append(out)
        x = out
    heads = []
    for head in ("policy", "value"):
        conv = step.forward(network, getattr(net, f"{head}_conv"), x, path=f"{head}_conv")
        fc = step.forward(network, getattr(net, f"{head}_fc"), conv.flat(), path=f"{head}_fc")
        heads.append((conv, fc))
    loss = step.loss("loss", *(fc for _, fc in heads))
    grads = tuple(step.backward(conv, step.backward(fc, loss, input_grad=True), input_grad=True)
                  for conv, fc in heads)
    for block in reversed(blocks):
        grads = (step.backward(block, grads, input_grad=True),)
    step.backward(stem, grads)
    for fwd in (stem, *blocks, *(part for head in heads for part in head)):
        step.update(fwd)
    return step.graph
