"""A learner's update rule declared once: the losses it minimizes, each with the optimizer that
steps on it, and the target networks that follow the online ones. Two drivers run the
declaration: `Learner.eager_update` (autograd's backward and the learner's `torch.optim`
optimizers, as PyTorch is usually written) and `hetrl.compiled.step.GraphStep` (the gradient
and the optimizer's arithmetic in one function, compiled by torch.compile), so each update
rule exists once and runs either way, with the same parameters and optimizer state."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from hetrl.algos.networks import frozen

Metrics = dict[str, torch.Tensor]
Loss = Callable[[Any, Any], tuple[torch.Tensor, Metrics]]
"""`loss(batch, count)` -> (the scalar loss, detached metrics). `count` is the number of
updates made before this one: an int in eager, a 0-d tensor inside the compiled graph."""


@dataclass(frozen=True)
class Stage:
    """One optimizer step of an update: the learner's optimizer `optimizer` (an attribute
    name) minimizes `loss`, its gradient norm clipped to `max_grad_norm`. Networks named in
    `frozen` get no weight gradients from it (eager autograd would compute them only to be
    discarded: DDPG's actor loss runs through the critic). `when(count)`, if given, says
    whether the stage runs on this update (TD3's delayed actor; a bool of an int count, a
    boolean tensor of a tensor one); between its runs, its `carried` metrics are those of the
    last time it ran (zeros before)."""

    optimizer: str
    loss: Loss
    max_grad_norm: float | None = None
    frozen: tuple[str, ...] = ()
    when: Callable[[Any], Any] | None = None
    # the submodules (paths) of each group of stacked networks (`hetrl.algos.ensemble`)
    # whose networks' gradient norms are clipped each on its own, network k's being slice k
    # of every tensor of the group: MADDPG's trainers (empty: the stage's gradient together)
    clip_slices: tuple[tuple[str, ...], ...] = ()
    carried: tuple[str, ...] = ()  # with `when`: the metrics reported between its runs
    # the phase its backward and optimizer step are timed under (the loss may time its own
    # parts: MADDPG's target_q, then q_loss)
    phase: str | None = None


@dataclass(frozen=True)
class TargetSync:
    """`target` follows `online` (submodule paths of the learner: `critic_targets.2`) after an
    update: Polyak averaging with `tau` (a copy of parameters and buffers at tau=1), on the
    updates where `when(count)` holds (every update without it)."""

    target: str
    online: str
    tau: float = 1.0
    when: Callable[[Any], Any] | None = None


def every(period: int) -> Callable[[Any], Any]:
    """The `when` of a stage or sync that runs on every `period`-th update (the updates with
    (count + 1) % period == 0: DQN's target copy, TD3's delayed actor)."""
    return lambda count: (count + 1) % period == 0


def due(when: Callable[[int], bool] | None, count: int) -> bool:
    """Whether a stage or a target sync runs on update `count` (eager: an int count)."""
    return when is None or bool(when(count))


def stage_loss(learner: nn.Module, stage: Stage, batch: Any,
               count: int) -> tuple[torch.Tensor, Metrics]:
    """The stage's loss and metrics, computed with its `frozen` networks frozen."""
    with ExitStack() as stack:
        for name in stage.frozen:
            stack.enter_context(frozen(learner.get_submodule(name)))
        return stage.loss(batch, count)


def clip_groups(learner: nn.Module, stage: Stage) -> list[list[nn.Parameter]] | None:
    """The groups of the stage's stacked parameters whose slices' gradient norms are clipped
    each on its own, one per entry of `stage.clip_slices` (None: all the stage trains,
    together)."""
    if not stage.clip_slices:
        return None
    return [[p for path in group for p in learner.get_submodule(path).parameters()]
            for group in stage.clip_slices]


@torch.no_grad()
def sync_target(target: nn.Module, online: nn.Module, tau: float) -> None:
    """target <- (1 - tau) * target + tau * online (parameters, in one fused call); at tau=1
    a copy of parameters and buffers."""
    if tau == 1.0:
        torch._foreach_copy_([*target.parameters(), *target.buffers()],
                             [*online.parameters(), *online.buffers()])
    else:
        torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), tau)
