"""A learner's declared update (`hetrl.algos.rule`) as one function of tensors: each stage's
loss and its gradient (`torch.func.grad_and_value` of the learner called through
`torch.func.functional_call`), its gradient clipped, its optimizer's arithmetic
(`hetrl.compiled.optim`), then the target syncs, every parameter, optimizer state and
carried metric written back in place at the end. Compiled by `torch.compile`, the whole
update is one graph: forward, gradient, optimizer and targets, with no Python in between.

The state is the learner's own (its parameters, its torch optimizers' state tensors), so
the eager update and this one take turns on it freely, and a checkpoint of either restores
into the other. The update count is a tensor, and a stage's `when` a `torch.where` choice:
no step compiles the graph again."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Callable

import torch
from torch import nn
from torch.func import functional_call, grad_and_value

from hetrl.algos.base import Learner, Metrics
from hetrl.algos.rule import Stage, TargetSync
from hetrl.compiled.optim import FunctionalOptimizer, Unsupported, clip_grad_norm, functional

Compiler = Callable[[Callable], Callable]


class _Call(nn.Module):
    """The learner as a module whose forward runs a function of it (a stage's loss), so that
    `functional_call` runs the loss on tensors of its choosing."""

    def __init__(self, learner: Learner) -> None:
        super().__init__()
        self.learner = learner

    def forward(self, fn: Callable, *args: Any) -> Any:
        return fn(*args)


class _NoTimer:
    """The learner's phase timer inside the graph: there the update is one phase."""

    def __call__(self, name: str) -> nullcontext:
        return nullcontext()


def unsupported(learner: Learner) -> str | None:
    """Why `learner`'s update cannot run as one graph here (None: it can)."""
    if learner.scaler is not None:
        return "float16 loss scaling runs in the eager update"
    for name, module in learner.named_modules():
        if module._forward_hooks or module._forward_pre_hooks or hasattr(module,
                                                                         "parametrizations"):
            return (f"{name or 'the learner'} has forward hooks or parametrizations (per-layer "
                    "precision, QAT): they run in the eager update")
    try:
        for stage in learner.stages():
            functional(getattr(learner, stage.optimizer))
    except Unsupported as error:
        return str(error)
    return None


class GraphStep:
    """`learner`'s update as one function, compiled by `compiler` (None: run as it is); a
    learner whose stages change from update to update (MADDPG's trainer takes turns) gets one
    graph for each `learner.graph_key()`."""

    def __init__(self, learner: Learner, compiler: Compiler | None) -> None:
        self.learner, self.compiler = learner, compiler
        self.call = _Call(learner)
        named = [*learner.named_parameters(), *learner.named_buffers()]
        self.names = [name for name, _ in named]
        self.values = [t.detach() for _, t in named]  # the learner's tensors, aliased
        self.index = {id(t): name for name, t in named}
        self.count = torch.zeros((), dtype=torch.int64, device=learner.device)
        self.expected = -1
        self.fns: dict[int, Callable] = {}
        self.stages: dict[int, list[Stage]] = {}
        self.rules: dict[int, FunctionalOptimizer] = {}  # by id of the stage
        self.trained: dict[int, list[torch.Tensor]] = {}
        self.lrs: dict[int, tuple[float, torch.Tensor]] = {}

    def __call__(self, batch: Any) -> Metrics:
        learner = self.learner
        key = learner.graph_key()
        fn = self.fns.get(key)
        if fn is None:
            fn = self.fns[key] = self._make(learner.stages(), learner.targets())
        if learner.updates != self.expected:  # restored, or counted elsewhere
            self.count.fill_(learner.updates)
        self.expected = learner.updates + 1
        stages = self.stages[key]
        timer, learner.timer = learner.timer, _NoTimer()
        try:
            return fn(self.values, [self._state(s) for s in stages],
                      [self._lr(s) for s in stages], self.count,
                      [self._carried(s) for s in stages], _without_indices(batch))
        finally:
            learner.timer = timer

    def _optimizer(self, stage: Stage) -> torch.optim.Optimizer:
        return getattr(self.learner, stage.optimizer)

    def _trained(self, stage: Stage) -> list[torch.Tensor]:
        """The parameters the stage steps: its optimizer's (under `stage.trains`, if given)."""
        params = self._optimizer(stage).param_groups[0]["params"]
        if not stage.trains:
            return params
        prefixes = tuple(f"{path}." for path in stage.trains)
        return [p for p in params if self.index[id(p)].startswith(prefixes)]

    def _state(self, stage: Stage) -> dict[str, list[torch.Tensor]]:
        """The stage's optimizer state tensors by key, made as torch makes them if absent."""
        optimizer, rule = self._optimizer(stage), self.rules[id(stage)]
        params = self.trained[id(stage)]
        for p in params:
            if not optimizer.state.get(p):
                optimizer.state[p] = rule.init_state(p)
        return {key: [optimizer.state[p][key] for p in params] for key in rule.keys}

    def _lr(self, stage: Stage) -> torch.Tensor:
        """The learning rate as a tensor (a schedule changes it without a new graph)."""
        lr = self._optimizer(stage).param_groups[0]["lr"]
        held, tensor = self.lrs[id(stage)]
        if held != lr:
            tensor.fill_(lr)
            self.lrs[id(stage)] = (lr, tensor)
        return tensor

    def _carried(self, stage: Stage) -> list[torch.Tensor]:
        learner = self.learner
        for name in stage.carried:
            if name not in learner.carried_metrics:
                learner.carried_metrics[name] = torch.zeros((), device=learner.device)
        return [learner.carried_metrics[name] for name in stage.carried]

    def _make(self, stages: list[Stage], syncs: list[TargetSync]) -> Callable:
        """The update function of these stages and syncs (compiled)."""
        for stage in stages:
            optimizer = self._optimizer(stage)
            self.rules[id(stage)] = functional(optimizer)
            lr = optimizer.param_groups[0]["lr"]
            self.lrs[id(stage)] = (lr, torch.tensor(lr, dtype=torch.float64))
        self.stages[self.learner.graph_key()] = stages
        for stage in stages:
            self.trained[id(stage)] = self._trained(stage)
        owned = [[self.index[id(p)] for p in self.trained[id(s)]] for s in stages]
        rules = [self.rules[id(s)] for s in stages]
        update = self._update_fn(stages, syncs, owned, rules)
        return update if self.compiler is None else self.compiler(update)

    def _update_fn(self, stages: list[Stage], syncs: list[TargetSync],
                   owned: list[list[str]], rules: list[FunctionalOptimizer]) -> Callable:
        names, call = self.names, self.call
        params = {name for name, _ in self.learner.named_parameters()}

        def update(values: list[torch.Tensor], states: list[dict[str, list[torch.Tensor]]],
                   lrs: list[torch.Tensor], count: torch.Tensor,
                   carried: list[list[torch.Tensor]], batch: Any) -> Metrics:
            live = dict(zip(names, values))
            metrics: Metrics = {}
            writes: list[tuple[torch.Tensor, torch.Tensor]] = []
            for stage, mine, rule, state, lr, kept in zip(stages, owned, rules, states, lrs,
                                                          carried):
                def loss_of(trained: dict[str, torch.Tensor], rest: dict[str, torch.Tensor],
                            stage: Stage = stage) -> Any:
                    # `rest` an input, not captured: a BatchNorm in training mode updates
                    # its running statistics in place
                    tensors = {f"learner.{k}": v for k, v in {**rest, **trained}.items()}
                    return functional_call(call, tensors, (stage.loss, batch, count))

                trained = {name: live[name] for name in mine}
                grads, (_, out) = grad_and_value(loss_of, has_aux=True)(
                    trained, {k: v for k, v in live.items() if k not in trained})
                g = [grads[name] for name in mine]
                if stage.max_grad_norm is not None:
                    g = clip_grad_norm(g, stage.max_grad_norm)
                new_params, new_state = rule.step([live[n] for n in mine], g, state,
                                                  lr.to(g[0].device))
                runs = None if stage.when is None else stage.when(count)
                for name, p in zip(mine, new_params):
                    live[name] = _chosen(runs, p, live[name])
                for key in rule.keys:
                    writes += [(old, _chosen(runs, new, old))
                               for old, new in zip(state[key], new_state[key])]
                for name, old in zip(stage.carried, kept):
                    out[name] = _chosen(runs, out[name], old)
                    writes.append((old, out[name]))
                metrics.update(out)
            for sync in syncs:
                _sync(live, params, sync, count)
            with torch.no_grad():
                for value, name in zip(values, names):
                    value.copy_(live[name])
                for old, new in writes:
                    old.copy_(new)
                count.add_(1)
            return metrics

        return update


def _chosen(runs: torch.Tensor | None, new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """`new` where the stage ran on this update, else `old`."""
    return new if runs is None else torch.where(runs, new, old)


def _sync(live: dict[str, torch.Tensor], params: set[str], sync: TargetSync,
          count: torch.Tensor) -> None:
    """The target sync on the live tensors: a copy of the online network's parameters and
    buffers at tau=1, else Polyak averaging of its parameters."""
    runs = None if sync.when is None else sync.when(count)
    prefix = f"{sync.target}."
    for name in [n for n in live if n.startswith(prefix)]:
        if sync.tau != 1.0 and name not in params:
            continue
        target, online = live[name], live[f"{sync.online}.{name[len(prefix):]}"]
        new = online if sync.tau == 1.0 else torch.lerp(target, online, sync.tau)
        live[name] = _chosen(runs, new, target)


def _without_indices(batch: Any) -> Any:
    """The batch's tensors for the graph: a prioritized batch's replay indices (numpy, read
    by the replay, not the update) stay out of it."""
    return batch._replace(indices=None) if getattr(batch, "indices", None) is not None else batch
