"""Data-parallel trainers for `scheduler=selfplay` (spec C.1.2): `trainers` ranks train one
generation together through torch.distributed (gloo on the CPU) and DDP's all-reduce.

Rank 0 is the loop's own process (its learner's `net`); ranks 1..k−1 are processes that keep
their own copy of the window (each new generation's positions are sent to them once) and of
the learner. Each rank draws `batch_size / k` positions a step, so the global batch stays
`batch_size`; DDP averages the gradients, and every rank's optimizer takes the same step.

The all-reduce is timed where it happens: every rank's DDP runs its gradient buckets through
`AllReduceTimer.hook`, a communication hook that all-reduces each bucket exactly as DDP's
default does (`allreduce_hook`) and records, on rank 0, when the bucket was handed to gloo
and when its future completed. A generation's all-reduce time is the length of the union of
those intervals (buckets in flight together count once): the seconds during which rank 0 had
gradients on the wire, waiting for the slowest rank included, overlapped with the backward
pass or not. DDP's broadcast of the BN statistics before each forward is not in it.
"""

from __future__ import annotations

import gc
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

from hetrl.actors.worker_logs import log, log_to, worker_log
from hetrl.actors.workers import leave_stops_to_the_job, next_answer, starting, stop_workers
from hetrl.algos.alphazero import AlphaZero, make_learner
from hetrl.precision.uniform import UniformPrecision
from hetrl.replay.loader import WindowLoader
from hetrl.replay.window import Generation, GenerationWindow
from hetrl.runtime import configure_torch
from hetrl.scheduler.state import LoopState
from hetrl.scheduler.updates import Updates


def rendezvous_file() -> str:
    """A fresh path for the ranks' rendezvous (torch's FileStore). A file, not a TCP port:
    a port found free and bound seconds later by rank 0 (once the spawned ranks have imported
    torch) can be taken meanwhile by any process on the host, and a rank that reaches the
    wrong listener waits out the whole timeout."""
    return str(Path(tempfile.mkdtemp(prefix="hetrl-ddp-")) / "rendezvous")


def init_group(rank: int, world: int, rendezvous: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank,
                            world_size=world, timeout=timedelta(minutes=10))


def leave_group() -> None:
    """Destroy this process's group, once the caller has dropped its DDP modules. The order
    matters: a DDP's reducer holding the last reference to a gloo group destroys it with the
    GIL held, joining gloo's threads, while one of them, finishing a Python comm-hook callback
    (`AllReduceTimer.hook`'s), waits for the GIL: a deadlock (seen under load). The group's
    own Python object releases the GIL as it goes."""
    gc.collect()  # a DDP module in a reference cycle
    if dist.is_initialized():
        dist.destroy_process_group()


def union_seconds(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of (start, end) intervals."""
    total, reach = 0.0, -np.inf
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


class AllReduceTimer:
    """DDP's default gradient all-reduce (`allreduce_hook`: each bucket divided by the world
    size and summed over the ranks), with the time each bucket's all-reduce was in flight
    and the bytes it moved recorded. Register `hook` (`ddp.register_comm_hook(None,
    timer.hook)`); `take()` returns and clears what was recorded."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # completion callbacks run on gloo's threads
        self._intervals: list[tuple[float, float]] = []
        self._bytes = 0
        self._buckets = 0

    def hook(self, state, bucket):  # noqa: ANN001, ANN201  (DDP checks the annotations as
        # objects: under `from __future__ import annotations` they would be strings)
        """(the process group, a dist.GradBucket) -> a Future of the averaged bucket."""
        buffer = bucket.buffer()
        nbytes = buffer.numel() * buffer.element_size()
        start = time.perf_counter()

        def done(fut: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
            end = time.perf_counter()
            with self._lock:
                self._intervals.append((start, end))
                self._bytes += nbytes
                self._buckets += 1
            return fut.value()

        return allreduce_hook(state, bucket).then(done)

    def take(self) -> dict[str, float]:
        """Seconds with an all-reduce in flight (the union of the buckets' intervals), bytes
        all-reduced and buckets, since the last `take`."""
        with self._lock:
            intervals, nbytes, buckets = self._intervals, self._bytes, self._buckets
            self._intervals, self._bytes, self._buckets = [], 0, 0
        return {"seconds": union_seconds(intervals), "bytes": float(nbytes),
                "buckets": float(buckets)}


def data_parallel(net: torch.nn.Module) -> tuple[DDP, AllReduceTimer]:
    """`net` wrapped in DDP (rank 0's weights broadcast to every rank), its gradient
    all-reduce timed."""
    ddp = DDP(net)
    timer = AllReduceTimer()
    ddp.register_comm_hook(None, timer.hook)
    return ddp, timer


class DataParallelTrainers:
    """Ranks 1..k−1 of the data-parallel training, and rank 0's DDP: rank 0 (the loop) runs
    its update steps inside `training`, the other ranks theirs meanwhile, each on its own
    copy of the window (`add_generation` sends each new generation's positions)."""

    def __init__(self, k: int, learner: AlphaZero, seed: int, window: GenerationWindow) -> None:
        if any(".parametrizations." in key for key in learner.net.state_dict()):
            raise ValueError("selfplay.trainers > 1 trains plain fp32/bf16/fp16 networks: "
                             "precision=qat's parametrized layers do not travel to the other "
                             "ranks; use selfplay.trainers=1")
        self.k, self.learner = k, learner
        ctx = mp.get_context("spawn")
        self.rendezvous = rendezvous_file()
        self.inbox = [ctx.Queue() for _ in range(k - 1)]
        self.outbox: Any = ctx.Queue()
        optimizer = learner.optimizer.state_dict()
        self.logs = [worker_log(f"trainer-{rank}") for rank in range(1, k)]
        self.procs = [ctx.Process(target=_rank_main, daemon=True,
                                  args=(rank, k, self.rendezvous, learner.init_kwargs, optimizer,
                                        seed, window.size, self.inbox[rank - 1], self.outbox,
                                        self.logs[rank - 1]))
                      for rank in range(1, k)]
        with starting("spawn"):
            for p in self.procs:
                p.start()
        for generation in window.generations:  # a resumed loop's window
            self.add_generation(generation)
        init_group(0, k, self.rendezvous)
        self.ddp, self.allreduce = data_parallel(learner.net)
        self.comm: dict[str, float] = {}  # the last training's all-reduce (`AllReduceTimer.take`)

    def add_generation(self, generation: Generation) -> None:
        for q in self.inbox:
            q.put(("generation", generation))

    @contextmanager
    def training(self, steps: int) -> Iterator[None]:
        """The block runs rank 0's `steps` update steps, through DDP, while the other ranks
        run theirs; then waits for them and records the all-reduce in `comm`."""
        learner = self.learner
        for q in self.inbox:
            q.put(("train", steps, learner.updates))
        with learner.trained_through(self.ddp):
            yield
        for _ in self.procs:  # ranks 1..: a dead one is named at once
            kind, payload = next_answer(self.outbox, self.procs, "data-parallel trainer rank",
                                        600, first_rank=1, logs=self.logs)
            if kind != "done":
                raise RuntimeError(f"trainer rank failed:\n{payload}")
        self.comm = self.allreduce.take()

    def close(self) -> None:
        stop_workers(self.inbox, self.procs)
        self.ddp = None
        leave_group()
        shutil.rmtree(Path(self.rendezvous).parent, ignore_errors=True)


def _rank_main(rank: int, world: int, rendezvous: str, kwargs: dict, optimizer: dict, seed: int,
               window_size: int, inbox: Any, outbox: Any, log_file: Path | None = None) -> None:
    import traceback

    leave_stops_to_the_job()
    log_to(log_file)
    configure_torch(1)
    # the rank's own symmetry draws (a fresh process's torch generator is seeded at random)
    torch.manual_seed(int(np.random.SeedSequence([seed, rank]).generate_state(1)[0]))
    try:
        learner = make_learner(**kwargs)
        learner.optimizer.load_state_dict(optimizer)
        init_group(rank, world, rendezvous)
        ddp, timer = data_parallel(learner.net)  # the same hook on every rank
        window = GenerationWindow(window_size, np.random.default_rng([seed, rank]))
        loader = WindowLoader(window)  # as rank 0's: a batch read ahead
        # fp32: the run's precision (autocast, loss scaling) is applied on rank 0 alone
        updates = Updates(learner, loader, UniformPrecision("float32", None), LoopState(), world)
        while (task := inbox.get()) is not None:
            if task[0] == "generation":
                window.add(task[1])
                continue
            _, steps, learner.updates = task  # rank 0's count: the same learning rate
            log.info("%d update steps from update %d", steps, learner.updates)
            with learner.trained_through(ddp), loader.reading(steps):
                for _ in range(steps):
                    updates.step()
            timer.take()  # rank 0's figures are the ones logged
            outbox.put(("done", rank))
        del ddp
        leave_group()
    except Exception:  # noqa: BLE001  (reported to the loop)
        outbox.put(("error", traceback.format_exc()))


def ddp_gradients(rank: int, world: int, rendezvous: str, kwargs: dict, state: dict,
                  batch: tuple, out: Any) -> None:
    """One rank's gradients after DDP's all-reduce as the trainers run it (timed by
    `AllReduceTimer`), on its shard of `batch` (numpy arrays, rows split evenly, no
    augmentation, BN on running statistics), and what the timer recorded: for the
    data-parallel test."""
    configure_torch(1)
    try:
        learner = make_learner(**kwargs)
        learner.net.load_state_dict(state)
        init_group(rank, world, rendezvous)
        ddp, timer = data_parallel(learner.net)
        shard = tuple(torch.from_numpy(np.array_split(a, world)[rank]) for a in batch)
        loss, _ = learner.losses(shard, ddp, augmented=False, train=False)
        loss.backward()
        # numpy, not tensors: a tensor in a queue is shared through the sender, gone by then
        grads = {n: p.grad.numpy().copy() for n, p in learner.net.named_parameters()}
        out.put((rank, (grads, timer.take())))
        del ddp, loss
        leave_group()
    except Exception:  # noqa: BLE001  (reported to the loop)
        import traceback
        out.put((rank, traceback.format_exc()))
