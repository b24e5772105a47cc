"""Per-node costs of a learner's real training step, measured on one of this host's devices.

Nothing here is modeled. A copy of the learner runs `update` on a random batch under hooks:
each leaf layer's forward is timed from its forward pre-hook to its forward hook, its backward
from its backward pre-hook to its backward hook (for a network's first layer, whose input needs
no gradient, torch fires that hook early: its weight gradient runs until the next event), and
each optimizer's step by step hooks. An optimizer step is one fused kernel over all its
parameters, so its measured time is split over the update nodes of its layers by parameter
count (the update is memory-bound, linear in parameters). What the hooks do not see (the loss,
TD targets, gradient clipping, Python glue) is the step's measured wall time less the hooked
time, and goes to the loss node(s): so the nodes' times sum to the measured step.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections import defaultdict
from time import perf_counter
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from hetrl.algos.base import Batch, Learner, RolloutBatch
from hetrl.partition.graph import Kind, Pass, TaskGraph
from hetrl.precision.native import compute_in
from hetrl.seeding import rng_states, set_rng_states

Key = tuple[str, str, Pass]  # (network, layer path, pass)


class _Event(NamedTuple):
    time: float
    key: Key | None  # None: an optimizer event
    end: bool
    until_next: bool = False  # an end torch fired early: the pass runs until the next event


def measure_step(learner: Learner, graph: TaskGraph, obs_space: gym.Space, act_space: gym.Space,
                 device: torch.device, warmup: int = 2, repeats: int = 5,
                 dtype: str = "float32") -> np.ndarray:
    """Seconds of each node of `graph` on `device`: the median over the `repeats` updates of
    a copy of `learner` that ran it (TD3's delayed actor runs every other update), the update
    computing in `dtype` as a run would (`compute_in`), so that each layer pass is timed in that
    dtype (weights and optimizer stay float32); the learner itself, its weights and every RNG
    stay as they were."""
    saved = rng_states()
    context = (contextlib.nullcontext() if dtype == "float32"
               else compute_in(device.type, getattr(torch, dtype)))
    probe = copy.deepcopy(learner).to(device)
    probe.device = device
    batch = random_batch(probe, obs_space, act_space, probe.batch_size, device)
    samples = []
    try:
        with _Hooks(probe, graph, device) as hooks, warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            for i in range(warmup + repeats):
                hooks.start()
                with context:
                    probe.learn(batch)
                if i >= warmup:
                    samples.append(hooks.node_seconds())
    finally:
        set_rng_states(saved)
    return np.nan_to_num(np.nanmedian(np.array(samples), axis=0))


def compare_updates(learners: dict[str, Learner], contexts: dict[str, Any],
                    obs_space: gym.Space, act_space: gym.Space, device: torch.device,
                    warmup: int = 2, repeats: int = 10) -> dict[str, float]:
    """Median seconds of one whole update of each learner (set up already in its precision)
    under its context, the learners taking turns update by update (in alternating order) so
    that a load that comes and goes on a shared host, and whatever the one before left in the
    caches, weigh on each alike. The learners are trained on a random
    batch: pass copies; every RNG stays as it was."""
    saved = rng_states()
    samples: dict[str, list[float]] = {name: [] for name in learners}
    try:
        batch = random_batch(next(iter(learners.values())), obs_space, act_space,
                             next(iter(learners.values())).batch_size, device)
        names = list(learners)
        for i in range(warmup + repeats):
            for name in names if i % 2 == 0 else names[::-1]:  # no learner always goes first
                learner = learners[name]
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                start = perf_counter()
                with contexts[name]:
                    learner.learn(batch)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                if i >= warmup:
                    samples[name].append(perf_counter() - start)
    finally:
        set_rng_states(saved)
    return {name: float(np.median(times)) for name, times in samples.items()}


def random_batch(learner: Learner, obs_space: gym.Space, act_space: gym.Space, n: int,
                 device: torch.device, seed: int = 0
                 ) -> Batch | RolloutBatch | tuple[torch.Tensor, ...]:
    """A batch of the kind `learner.update` takes, from a generator of its own seeded with
    `seed` (no global RNG is touched): only its shapes and dtypes matter for timing."""
    rng = np.random.default_rng(seed)
    if hasattr(learner, "random_batch"):  # a batch of its own kind (AlphaZero's positions)
        return learner.random_batch(n, rng, device)

    def draw(space: gym.Space) -> torch.Tensor:
        if isinstance(space, gym.spaces.Discrete):
            values = rng.integers(space.n, size=n)
        elif isinstance(space, gym.spaces.MultiDiscrete):  # one move per agent
            values = rng.integers(space.nvec, size=(n, *space.shape))
        elif space.dtype == np.uint8:
            values = rng.integers(0, 256, size=(n, *space.shape), dtype=np.uint8)
        else:
            values = rng.standard_normal((n, *space.shape)).astype(np.float32)
            if np.isfinite(space.low).all() and np.isfinite(space.high).all():
                values = np.clip(values, space.low, space.high).astype(np.float32)  # f64 bounds
        return torch.as_tensor(values, device=device)

    agents = getattr(learner, "n_agents", None)  # multi-agent: a reward per agent
    per_row = (n,) if agents is None else (n, agents)

    def normal() -> torch.Tensor:
        return torch.as_tensor(rng.standard_normal(per_row).astype(np.float32), device=device)

    if learner.on_policy:
        return RolloutBatch(draw(obs_space), draw(act_space), normal(), normal(), normal(),
                            normal())
    return Batch(draw(obs_space), draw(act_space), normal(), draw(obs_space),
                 torch.zeros(per_row, device=device))


class _Hooks:
    """Hooks on every leaf layer of the graph's networks and on the learner's optimizers,
    turning one update's event timeline into per-node seconds."""

    def __init__(self, learner: Learner, graph: TaskGraph, device: torch.device) -> None:
        self.learner, self.graph, self.device = learner, graph, device
        self.events: list[_Event] = []
        self.handles: list[Any] = []
        self.optimizer_s: dict[str, float] = {}
        self.optimizer_start: dict[str, float] = {}

    def __enter__(self) -> _Hooks:
        for network in {node.network for node in self.graph.nodes if node.kind is not Kind.loss}:
            for path, module in getattr(self.learner, network).named_modules():
                if not any(module.children()):
                    self._hook_layer(network, path, module)
        for name, optimizer in self.learner.optimizers().items():
            self.handles.append(optimizer.register_step_pre_hook(
                lambda *args, name=name: self._optimizer(name, start=True)))
            self.handles.append(optimizer.register_step_post_hook(
                lambda *args, name=name: self._optimizer(name, start=False)))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self.handles:
            handle.remove()

    def _now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return perf_counter()

    def _hook_layer(self, network: str, path: str, module: torch.nn.Module) -> None:
        forward, backward = (network, path, Pass.forward), (network, path, Pass.backward)
        add = self.handles.append
        add(module.register_forward_pre_hook(lambda *a: self._event(forward, end=False)))
        add(module.register_forward_hook(lambda *a: self._event(forward, end=True)))
        add(module.register_full_backward_pre_hook(lambda *a: self._event(backward, end=False)))

        def backward_done(mod: torch.nn.Module, grad_in: tuple, grad_out: tuple) -> None:
            # no input gradient: fired before the weight gradient, which ends at the next event
            early = all(g is None for g in grad_in)
            self.events.append(_Event(self._now(), backward, True, until_next=early))

        add(module.register_full_backward_hook(backward_done))

    def _event(self, key: Key, end: bool) -> None:
        self.events.append(_Event(self._now(), key, end))

    def _optimizer(self, name: str, start: bool) -> None:
        now = self._now()
        self.events.append(_Event(now, None, True))
        if start:
            self.optimizer_start[name] = now
        else:
            elapsed = now - self.optimizer_start.pop(name)
            self.optimizer_s[name] = self.optimizer_s.get(name, 0.0) + elapsed

    def start(self) -> None:
        self.events.clear()
        self.optimizer_s.clear()
        self.t0 = self._now()

    def node_seconds(self) -> list[float]:
        wall = self._now() - self.t0
        spans: dict[Key, list[float]] = defaultdict(list)
        opened: dict[Key, float] = {}
        pending: Key | None = None  # a pass that ends at the next event
        for event in [*self.events, _Event(self.t0 + wall, None, True)]:
            if pending is not None:
                spans[pending].append(event.time - opened.pop(pending))
                pending = None
            if event.key is None:
                continue
            if not event.end:
                opened[event.key] = event.time
            elif event.until_next:
                pending = event.key
            else:
                spans[event.key].append(event.time - opened.pop(event.key))
        seconds = [np.nan] * len(self.graph.nodes)  # nan: the node did not run this update
        taken: dict[Key, int] = defaultdict(int)
        for i, node in enumerate(self.graph.nodes):
            key = (node.network, node.layer, node.pass_)
            if node.layer_pass:
                times = spans.get(key, [])
                if taken[key] < len(times):
                    seconds[i] = times[taken[key]]
                taken[key] += 1
        self._apportion_updates(seconds)
        losses = [i for i, node in enumerate(self.graph.nodes) if node.kind is Kind.loss]
        rest = max(0.0, wall - np.nansum(seconds))
        for i in losses:
            seconds[i] = rest / len(losses)
        return seconds

    def _apportion_updates(self, seconds: list[float]) -> None:
        owner = {id(p): name for name, opt in self.learner.optimizers().items()
                 for group in opt.param_groups for p in group["params"]}
        shares: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for i, node in enumerate(self.graph.nodes):
            if node.pass_ is Pass.update:
                params = list(getattr(self.learner, node.network).get_submodule(node.layer)
                              .parameters())
                name = owner.get(id(params[0])) if params else None
                if name is not None:
                    shares[name].append((i, sum(p.numel() for p in params)))
        for name, nodes in shares.items():
            total = sum(count for _, count in nodes)
            for i, count in nodes:
                if name in self.optimizer_s:
                    seconds[i] = self.optimizer_s[name] * count / total
