"""A learner's declared update (`hetrl.algos.rule`) as one function of tensors: each stage's
loss and its gradient (`torch.func.grad_and_value` of the loss, run on tensors of its choosing
placed in the learner's modules: `hetrl.algos.placement`), its gradient clipped, its
optimizer's arithmetic (`hetrl.compiled.optim`), then the target syncs, every parameter and
optimizer state written back in place at the end. Compiled by `torch.compile`, the whole
update is one graph: forward, gradient, optimizer and targets, with no Python in between.

The state is the learner's own (its parameters, its torch optimizers' state tensors), so
the eager update and this one take turns on it freely, and a checkpoint of either restores
into the other. The update count is a tensor (no step compiles the graph again); the stages
an update runs are chosen outside the graph, by the count: each set of them (TD3's critics
alone, and its critics and actor), and each setting of the learner's `modes` (QAT's fake
quantization, off until its delay), is a graph of its own, with no branch on data in it. A
target sync's `when` is a `torch.where` choice inside the graph, as float16's dynamic loss
scaling is (`hetrl.compiled.scaling`: an overflowing stage's step kept out, the scale backed
off or grown, on the learner's GradScaler's own state)."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.func import grad_and_value

from hetrl.algos.base import Learner, Metrics
from hetrl.algos.ensemble import per_slice, slice_scales
from hetrl.algos.placement import aligned, held, place, place_ties, slots
from hetrl.algos.rule import Stage, TargetSync, clip_groups, due
from hetrl.compiled.optim import FunctionalOptimizer, Unsupported, clip_grad_norm, functional
from hetrl.compiled.scaling import GraphScaler, kept

Compiler = Callable[[Callable], Callable]


def unsupported(learner: Learner) -> str | None:
    """Why `learner`'s update cannot run as one graph here (None: it can)."""
    if type(learner).stages is Learner.stages:
        return f"{type(learner).__name__} writes its update by hand (it declares no stages)"
    try:
        for stage in learner.stages():
            functional(getattr(learner, stage.optimizer))
    except Unsupported as error:
        return str(error)
    return None


class GraphStep:
    """`learner`'s update as one function, compiled by `compiler` (None: run as it is). An
    update's form is the set of stages due on its count: each form gets a graph of its own."""

    def __init__(self, learner: Learner, compiler: Compiler | None) -> None:
        self.learner, self.compiler = learner, compiler
        self.slots = slots(learner)
        self.own = held(self.slots)  # placed back after the losses
        named = [*learner.named_parameters(), *learner.named_buffers()]
        self.names = [name for name, _ in named]
        self.values = [t.detach() for _, t in named]  # the learner's tensors, aliased
        self.index = {id(t): k for k, (_, t) in enumerate(named)}  # positions in `values`
        self.count = torch.zeros((), dtype=torch.int64, device=learner.device)
        self.expected = -1
        self.fns: dict[tuple[tuple[bool, ...], tuple[bool, ...]], Callable] = {}
        self.declared: tuple[list[Stage], list[TargetSync]] | None = None
        self.rules: dict[int, FunctionalOptimizer] = {}  # by id of the stage
        self.trained: dict[int, list[torch.Tensor]] = {}
        self.clips: dict[int, list[list[int]] | None] = {}  # positions in `trained`: `_clips`
        self.lrs: dict[int, tuple[float, torch.Tensor]] = {}
        scaler = learner.scaler
        self.scaling = (GraphScaler(scaler, learner.device)
                        if scaler is not None and scaler.is_enabled() else None)

    def __call__(self, batch: Any) -> Metrics:
        learner = self.learner
        if self.declared is None:
            self._declare(learner.stages(), learner.targets())
        stages, syncs = self.declared
        runs = tuple(due(stage.when, learner.updates) for stage in stages)
        form = (runs, tuple(mode() for mode in learner.modes))
        fn = self.fns.get(form)
        if fn is None:
            fn = self.fns[form] = self._make(stages, runs, syncs)
        if learner.updates != self.expected:  # restored, or counted elsewhere
            self.count.fill_(learner.updates)
        self.expected = learner.updates + 1
        ran = [stage for stage, run in zip(stages, runs) if run]
        metrics, skipped, _ = fn(self.values, [self._state(s) for s in ran],
                                 [self._lr(s) for s in ran], self.count,
                                 self.scaling.state() if self.scaling else [],
                                 _without_indices(batch))
        if skipped is not None:  # float16's overflowing steps, counted as eager counts them
            learner.skipped_steps += int(skipped)
        for stage, run in zip(stages, runs):  # as eager: a skipping stage's metrics carried
            if stage.when is None:
                continue
            if run:
                # a copy: a CUDA graph's outputs are overwritten by its next replay
                learner.carry({name: metrics[name].clone() for name in stage.carried})
            else:
                metrics.update(learner.carried(stage))
        return metrics

    def _optimizer(self, stage: Stage) -> torch.optim.Optimizer:
        return getattr(self.learner, stage.optimizer)

    def _clips(self, stage: Stage) -> list[list[int]] | None:
        """The positions, among the stage's parameters, of each group of stacked ones clipped
        slice by slice (None: the stage's gradient clipped together)."""
        params = self.trained[id(stage)]
        groups = clip_groups(self.learner, stage)
        if groups is None:
            return None
        at = {id(p): k for k, p in enumerate(params)}
        return [[at[id(p)] for p in group] for group in groups]

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

    def _declare(self, stages: list[Stage], syncs: list[TargetSync]) -> None:
        """Keep the learner's declaration, each stage's optimizer rule, learning rate, trained
        parameters and their groups clipped apart."""
        self.declared = (stages, syncs)
        for stage in stages:
            optimizer = self._optimizer(stage)
            self.rules[id(stage)] = functional(optimizer)
            lr = optimizer.param_groups[0]["lr"]
            # float32: dynamo traced a float64 scalar as a symbolic float, which inductor
            # could not keep in AlphaZero's graph: the trace restarted with the rate a constant
            self.lrs[id(stage)] = (lr, torch.tensor(lr, dtype=torch.float32,
                                                      device=self.learner.device))
            self.trained[id(stage)] = optimizer.param_groups[0]["params"]
            self.clips[id(stage)] = self._clips(stage)

    def _make(self, stages: list[Stage], runs: tuple[bool, ...],
              syncs: list[TargetSync]) -> Callable:
        """The update function of the stages that run and the syncs (compiled)."""
        ran = [stage for stage, run in zip(stages, runs) if run]
        owned = [[self.index[id(p)] for p in self.trained[id(s)]] for s in ran]
        rules = [self.rules[id(s)] for s in ran]
        posts = [[(self.index[id(p)], fn) for params, fn in rule.post for p in params]
                 for rule in rules]
        update = self._update_fn(ran, syncs, owned, rules, posts, self.scaling,
                                 [self.clips[id(s)] for s in ran])
        return update if self.compiler is None else self.compiler(update)

    def _update_fn(self, stages: list[Stage], syncs: list[TargetSync],
                   owned: list[list[int]], rules: list[FunctionalOptimizer],
                   posts: list[list[tuple[int, Callable]]],
                   scaling: GraphScaler | None,
                   clips: list[list[list[int]] | None]) -> Callable:
        """The update on the learner's tensors by position (in `self.names`' order): each
        lookup by name, each walk over the names, is done here, once, not in the function
        dynamo traces bytecode by bytecode."""
        names, where, own = self.names, self.slots, self.own
        at = {name: k for k, name in enumerate(names)}
        params = {name for name, _ in self.learner.named_parameters()}
        pairs = [([at[target] for target, _ in synced], [at[online] for _, online in synced])
                 for synced in (_synced(names, params, sync) for sync in syncs)]
        rests = [sorted(set(range(len(names))) - set(mine)) for mine in owned]
        layouts = [aligned(where, [names[k] for k in [*mine, *rest]])
                   for mine, rest in zip(owned, rests)]

        def update(values: list[torch.Tensor], states: list[dict[str, list[torch.Tensor]]],
                   lrs: list[torch.Tensor], count: torch.Tensor, scaler: list[torch.Tensor],
                   batch: Any) -> tuple[Metrics, torch.Tensor | None, list[torch.Tensor]]:
            live = list(values)
            metrics: Metrics = {}
            coefficients: list[torch.Tensor] = []  # returned: computed once (optim's note)
            writes: list[tuple[torch.Tensor, torch.Tensor]] = []
            scale, tracker = scaler if scaling is not None else (None, None)
            skipped = None
            try:
                for stage, mine, rest, layout, rule, post, state, lr, clip in zip(
                        stages, owned, rests, layouts, rules, posts, states, lrs, clips):
                    def loss_of(trained: list[torch.Tensor], others: list[torch.Tensor],
                                stage: Stage = stage, layout: Any = layout) -> Any:
                        # `others` an input, not captured: a BatchNorm in training mode
                        # updates its running statistics in place
                        tensors = [*trained, *others]
                        place(layout[0], tensors)
                        place_ties(layout[1], tensors)
                        loss, out = stage.loss(batch, count)
                        return (loss if scaling is None else loss * scale), out

                    trained = [live[k] for k in mine]
                    g, (_, out) = grad_and_value(loss_of, has_aux=True)(
                        trained, [live[k] for k in rest])
                    found = None
                    if scaling is not None:
                        g, found = scaling.unscale(g, scale)
                    if stage.max_grad_norm is not None:
                        g, scales = _clipped(g, clip, stage.max_grad_norm)
                        coefficients += scales
                    new_params, new_state, computed = rule.step(trained, g, state, lr)
                    coefficients += computed
                    if scaling is not None:  # an overflow skips the step: GradScaler's rule
                        new_state = {k: kept(found, new_state[k], state[k]) for k in rule.keys}
                        scale, tracker = scaling.update(scale, tracker, found)
                        skipped = found.int() if skipped is None else skipped + found.int()
                    _step(live, mine, new_params, post, found)
                    for key in rule.keys:
                        writes += zip(state[key], new_state[key])
                    metrics.update(out)
            finally:  # the modules' own tensors back, once, after every stage's loss
                place(where, own)
            for sync, (targets, onlines) in zip(syncs, pairs):
                _sync(live, targets, onlines, sync, count)
            if scaling is not None:
                writes += zip(scaler, (scale, tracker))
            with torch.no_grad():
                for value, new in zip(values, live):
                    value.copy_(new)
                for old, new in writes:
                    old.copy_(new)
                count.add_(1)
            return metrics, skipped, coefficients

        return update


def _step(live: list[torch.Tensor], mine: list[int], new: list[torch.Tensor],
          post: list[tuple[int, Callable]], found: torch.Tensor | None) -> None:
    """A stage's new values (of the tensors at positions `mine`) into `live`: its optimizer's
    step hooks' rules applied (to each parameter a hook names, stepped or not: the hook runs
    after every step), and on an overflow (`found`) the values from before: the step, and its
    hooks, skipped."""
    stepped = dict(zip(mine, new))
    for k, rule in post:
        stepped[k] = rule(stepped.get(k, live[k]))
    if found is not None:
        stepped = dict(zip(stepped, kept(found, list(stepped.values()),
                                          [live[k] for k in stepped])))
    for k, value in stepped.items():
        live[k] = value


def _clipped(grads: list[torch.Tensor], groups: list[list[int]] | None,
             max_norm: float) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """`grads` with their norm clipped to `max_norm`, or each stacked network's of each group
    (positions in them: `clip_slices`) on its own; the scales."""
    if groups is None:
        clipped, scale = clip_grad_norm(grads, max_norm)
        return clipped, [scale]
    out, scales = list(grads), []
    for group in groups:
        scale = slice_scales([grads[k] for k in group], max_norm)
        scales.append(scale)
        for k in group:
            out[k] = grads[k] * per_slice(scale, grads[k])
    return out, scales


def _synced(names: list[str], params: set[str], sync: TargetSync) -> list[tuple[str, str]]:
    """The (target, online) names a target sync writes: every parameter and buffer of the
    target at tau=1, else its parameters (Polyak averaging). Found where the update function
    is made: in it, a walk over every name for every sync is bytecode dynamo traces."""
    prefix = f"{sync.target}."
    return [(name, f"{sync.online}.{name[len(prefix):]}") for name in names
            if name.startswith(prefix) and (sync.tau == 1.0 or name in params)]


def _sync(live: list[torch.Tensor], targets: list[int], onlines: list[int], sync: TargetSync,
          count: torch.Tensor) -> None:
    """The target sync on the live tensors (by position: `_synced`'s pairs): its targets the
    online tensors, or Polyak averages of them (one foreach call, as eager's), on the updates
    it runs on."""
    old, online = [live[k] for k in targets], [live[k] for k in onlines]
    new = online if sync.tau == 1.0 else torch._foreach_lerp(old, online, sync.tau)
    if sync.when is not None:
        runs = sync.when(count)
        new = [torch.where(runs, n, o) for n, o in zip(new, old)]
    for k, value in zip(targets, new):
        live[k] = value


def _without_indices(batch: Any) -> Any:
    """The batch's tensors for the graph: a prioritized batch's replay indices (numpy, read
    by the replay, not the update) stay out of it."""
    return batch._replace(indices=None) if getattr(batch, "indices", None) is not None else batch
