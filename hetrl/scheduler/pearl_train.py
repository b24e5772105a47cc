"""Algorithm 1's CPU trainers (pool_train-CPU, specs/ap-drl-pearl.md §B.2.4): the learner's
batch of BS rows split, BS − b rows trained on the learner's thread and b rows on the CPU
trainers' threads (the cores Algorithm 1 took from the actors), each part the gradient of the
same declared stage's loss weighted by its share of the rows. The host sums the parts (the
Gradient Synchronizer), so the optimizer steps once, on the gradient of the whole batch.

The split runs inside the eager update (`Learner.split_loss`): a stage's loss becomes a
surrogate whose gradient is exactly the summed one, so the learner's `optimize` (clipping,
optimizer step) and the rule's targets and delays run as on BS rows. A compiled update or a
float16 loss scaler keeps b = 0 (`applies`): the compiled graph takes the whole batch, and
a part's unscaled float16 gradient could underflow. A loss that draws random numbers (TD3's
target smoothing) draws them part by part: the same update in distribution, not bit for bit."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import replace
from functools import reduce
from time import perf_counter
from typing import Any, NamedTuple

import torch

from hetrl.algos.base import Learner
from hetrl.algos.rule import Metrics, Stage, stage_loss


class Part(NamedTuple):
    """One part's weighted gradient (None where a parameter got none), metrics and rows."""

    grads: tuple[torch.Tensor | None, ...]
    metrics: Metrics
    rows: int
    seconds: float


def rows_of(batch: Any, lo: int, hi: int) -> Any:
    """Rows lo:hi of every field of a batch (a NamedTuple of tensors, arrays or None)."""
    return type(batch)(*(None if f is None else f[lo:hi] for f in batch))


def merged(parts: list[Part]) -> Metrics:
    """The whole batch's metrics: per-row ones (`td_errors`) joined in row order, scalar
    ones (means over the rows) weighted by each part's rows."""
    total = sum(p.rows for p in parts)
    out: Metrics = {}
    for name, value in parts[0].metrics.items():
        values = [p.metrics[name] for p in parts]
        out[name] = (torch.cat(values) if value.dim() else
                     sum(v * (p.rows / total) for v, p in zip(values, parts)))
    return out


class CpuTrainers:
    """The CPU trainers' pool: `trainers` threads training `b` of a batch's rows (set by
    Algorithm 1's decisions). `train_cpu_s` adds up the trainers' part (wall: they run side
    by side), `sync_s` the learner's wait for them and the sum of the gradients."""

    def __init__(self, learner: Learner, threads: int) -> None:
        self.learner = learner
        self.executor = ThreadPoolExecutor(max(threads, 1), thread_name_prefix="pearl-train-cpu")
        self.trainers, self.b = 0, 0
        self.train_cpu_s, self.sync_s = 0.0, 0.0

    def applies(self) -> bool:
        """Whether the learner's update can be split: eager, without a float16 loss scaler."""
        return self.learner.compiled_step is None and self.learner.scaler is None

    def set(self, trainers: int, b: int) -> None:
        """Algorithm 1's decision: `trainers` CPU trainers train `b` rows of each batch
        (none where the update cannot be split, or no trainer is left)."""
        split = trainers > 0 and b > 0 and self.applies()
        self.trainers, self.b = trainers, b if split else 0
        self.learner.split_loss = self.loss if split else None

    def loss(self, learner: Learner, stage: Stage, batch: Any,
             count: int) -> tuple[torch.Tensor, Metrics]:
        """The stage's surrogate loss over the split batch (its frozen networks frozen once,
        for every part) and the whole batch's metrics."""
        return stage_loss(learner, replace(stage, loss=lambda rows, c: self.split(
            stage, rows, c)), batch, count)

    def split(self, stage: Stage, batch: Any, count: int) -> tuple[torch.Tensor, Metrics]:
        n = len(batch.obs)
        b = min(self.b, n - 1)
        params = [p for g in getattr(self.learner, stage.optimizer).param_groups
                  for p in g["params"] if p.requires_grad]
        device = self.learner.device.type
        autocast = (device, torch.get_autocast_dtype(device), torch.is_autocast_enabled(device))
        bounds = [n - b + (b * k) // self.trainers for k in range(self.trainers + 1)]
        futures = [self.executor.submit(self.part, stage, rows_of(batch, lo, hi), count, n,
                                        params, autocast)
                   for lo, hi in zip(bounds, bounds[1:]) if hi > lo]
        own = self.part(stage, rows_of(batch, 0, n - b), count, n, params, None)
        waited = perf_counter()
        parts = [own] + [f.result() for f in futures]
        self.train_cpu_s += max(p.seconds for p in parts[1:])
        grads = [sum_grads([p.grads[k] for p in parts]) for k in range(len(params))]
        surrogate = sum((p * g).sum() for p, g in zip(params, grads) if g is not None)
        self.sync_s += perf_counter() - waited
        return surrogate, merged(parts)

    def part(self, stage: Stage, rows: Any, count: int, n: int, params: list[torch.Tensor],
             autocast: tuple[str, torch.dtype, bool] | None) -> Part:
        """One part's gradient of the stage's loss on its rows, weighted by rows / n; on a
        trainer thread, in the learner thread's autocast (autocast is per thread)."""
        start = perf_counter()
        with torch.autocast(*autocast[:2], enabled=autocast[2]) if autocast else nullcontext():
            loss, metrics = stage.loss(rows, count)
        size = len(rows.obs)
        grads = torch.autograd.grad(loss * (size / n), params, allow_unused=True)
        return Part(grads, metrics, size, perf_counter() - start)

    def close(self) -> None:
        self.learner.split_loss = None
        self.executor.shutdown(wait=True)


def sum_grads(grads: list[torch.Tensor | None]) -> torch.Tensor | None:
    """The parts' gradients of one parameter summed (None where no part gave one)."""
    given = [g for g in grads if g is not None]
    return reduce(torch.add, given) if given else None
