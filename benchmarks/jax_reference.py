"""The limit a compiled update is measured against (issue 38): hetrl's DQN update of an MLP
Q-network written in JAX and compiled whole by `jax.jit`, as CleanRL's JAX variants and
PureJaxRL compile theirs: the TD target from the target network, the loss of the job's
`algo.td_loss` weighed by the batch's importance weights, the gradient, its clipping to
`algo.max_grad_norm`, Adam (optax) and the target sync every `algo.target_update_interval`
updates, all in one XLA graph on one thread, its buffers donated (updated in place).

It starts from the torch learner's own weights and batch, and `matches` checks that one JAX
update lands where the eager one does: the reference is the same update, not a lighter one.
JAX and optax come with the `bench` extra only; where they are missing there is no reference.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from hetrl.algos.base import Batch
from hetrl.algos.dqn import DQN

# XLA's CPU client threads its kernels over every core unless told not to; hetrl's learners
# run on one thread, and so does this reference (set before jax is first imported)
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                                   "intra_op_parallelism_threads=1")

try:
    import jax
    import jax.numpy as jnp
    import optax
except ImportError:  # the bench extra is not installed
    jax = None

Params = list[tuple[object, object]]
"""An MLP's (weight, bias) per layer, weights as torch stores them: (out, in)."""


def why_none(learner: object) -> str | None:
    """Why `learner`'s update has no JAX reference here (None: it has one)."""
    if jax is None:
        return "JAX not installed (pip install -e '.[bench]')"
    if not isinstance(learner, DQN) or learner.double_dqn:
        return "written for DQN only"
    if learner.modes:
        return "written for fp32 only (not QAT's fake quantization)"
    if not all(isinstance(m, nn.Linear | nn.ReLU) for m in learner.q):
        return "written for an MLP Q-network only"
    return None


class JaxDQN:
    """`learner`'s DQN update in JAX on `batch`, from `learner`'s weights; calling it runs one
    update and waits for its result."""

    def __init__(self, learner: DQN, batch: Batch) -> None:
        self.optimizer = optax.chain(optax.clip_by_global_norm(learner.max_grad_norm),
                                     optax.adam(learner.lr))
        self.params = _params(learner.q)
        self.state = (self.params, _params(learner.q_target),
                      self.optimizer.init(self.params), jnp.asarray(learner.updates))
        self.batch = tuple(jnp.asarray(np.asarray(t, dtype=np.float32)) for t in (
            batch.obs, batch.actions, batch.rewards, batch.next_obs, batch.terminated,
            torch.ones_like(batch.rewards) if batch.weights is None else batch.weights))
        self.update = jax.jit(_update(learner, self.optimizer), donate_argnums=0)

    def __call__(self) -> dict:
        self.state, metrics = self.update(self.state, self.batch)
        return jax.block_until_ready(metrics)

    def weights(self) -> list[np.ndarray]:
        """The online network's weights and biases, layer by layer."""
        return [np.asarray(a) for layer in self.state[0] for a in layer]


def matches(learner: DQN, batch: Batch) -> float:
    """The largest difference between the online weights after one JAX update and after one
    eager update of `learner` (which it trains: run it on a copy)."""
    reference = JaxDQN(learner, batch)
    reference()
    learner.eager_update(batch)
    eager = [p.detach().numpy() for p in learner.q.parameters()]
    return max(float(np.abs(a - b).max()) for a, b in zip(reference.weights(), eager,
                                                            strict=True))


def _params(q: nn.Sequential) -> Params:
    return [(jnp.asarray(m.weight.detach().numpy()), jnp.asarray(m.bias.detach().numpy()))
            for m in q if isinstance(m, nn.Linear)]


def _forward(params: Params, x: object) -> object:
    for i, (w, b) in enumerate(params):
        x = x @ w.T + b
        if i < len(params) - 1:
            x = jax.nn.relu(x)
    return x


def _update(learner: DQN, optimizer: object) -> Callable:
    """The update as a pure function of (online, target, Adam's state, count) and the batch."""
    gamma, interval = learner.gamma, learner.target_update_interval
    td_loss = (optax.huber_loss if learner.td_loss is torch.nn.functional.smooth_l1_loss
               else optax.squared_error)

    def loss_of(params: Params, target: Params, batch: tuple) -> tuple:
        obs, actions, rewards, next_obs, terminated, weights = batch
        next_value = _forward(target, next_obs).max(axis=1)
        td_target = jax.lax.stop_gradient(rewards + gamma * (1.0 - terminated) * next_value)
        q = jnp.take_along_axis(_forward(params, obs), actions.astype(jnp.int32)[:, None],
                                axis=1)[:, 0]
        loss = (td_loss(q, td_target) * weights).mean()
        return loss, (q.mean(), q - td_target)

    def update(state: tuple, batch: tuple) -> tuple:
        params, target, opt_state, count = state
        (loss, (q_mean, td_errors)), grads = jax.value_and_grad(loss_of, has_aux=True)(
            params, target, batch)
        changes, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, changes)
        count = count + 1
        sync = count % interval == 0
        target = jax.tree.map(lambda t, p: jnp.where(sync, p, t), target, params)
        metrics = {"loss": loss, "q_mean": q_mean, "td_errors": td_errors}
        return (params, target, opt_state, count), metrics

    return update
