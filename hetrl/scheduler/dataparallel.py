"""Data-parallel trainers for `scheduler=selfplay` (spec C.1.2): `trainers` ranks train one
generation together through torch.distributed (gloo on the CPU) and DDP's all-reduce.

Rank 0 is the loop's own process (its learner's `net`); ranks 1..k−1 are processes that keep
their own copy of the window (each new generation's positions are sent to them once) and of
the learner. Each rank draws `batch_size / k` positions a step, so the global batch stays
`batch_size`; DDP averages the gradients, and every rank's optimizer takes the same step.
"""

from __future__ import annotations

import socket
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

from hetrl.algos.alphazero import AlphaZero, make_learner


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def init_group(rank: int, world: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(minutes=10))


def sample(window: list, rows: int, rng: np.random.Generator) -> tuple[torch.Tensor, ...]:
    """`rows` positions drawn uniformly from the window's generations."""
    planes = np.concatenate([w[1] for w in window])
    pis = np.concatenate([w[2] for w in window])
    zs = np.concatenate([w[3] for w in window])
    idx = rng.integers(len(planes), size=rows)
    return torch.from_numpy(planes[idx]), torch.from_numpy(pis[idx]), torch.from_numpy(zs[idx])


class DataParallelTrainers:
    def __init__(self, k: int, learner: AlphaZero, seed: int) -> None:
        if any(".parametrizations." in key for key in learner.net.state_dict()):
            raise ValueError("scheduler.trainers > 1 trains plain fp32/bf16/fp16 networks: "
                             "precision=qat's parametrized layers do not travel to the other "
                             "ranks; use scheduler.trainers=1")
        self.k, self.learner = k, learner
        ctx = mp.get_context("spawn")
        port = free_port()
        self.inbox = [ctx.Queue() for _ in range(k - 1)]
        self.outbox: Any = ctx.Queue()
        optimizer = learner.optimizer.state_dict()
        self.procs = [ctx.Process(target=_rank_main, daemon=True,
                                  args=(rank, k, port, learner.init_kwargs, optimizer, seed,
                                        self.inbox[rank - 1], self.outbox))
                      for rank in range(1, k)]
        for p in self.procs:
            p.start()
        init_group(0, k, port)
        self.ddp = DDP(learner.net)  # broadcasts rank 0's weights to every rank

    def add_generation(self, entry: tuple, window: int) -> None:
        for q in self.inbox:
            q.put(("generation", entry, window))

    def train(self, window: list, steps: int, rng: np.random.Generator, precision: Any
              ) -> dict[str, Any]:
        learner = self.learner
        for q in self.inbox:
            q.put(("train", steps, learner.updates))
        out: dict[str, Any] = {}
        rows = max(1, learner.batch_size // self.k)
        for _ in range(steps):
            with precision.autocast(learner.device):
                out = learner.update(sample(window, rows, rng), model=self.ddp)
        for _ in self.procs:
            kind, payload = self.outbox.get(timeout=600)
            if kind != "done":
                raise RuntimeError(f"trainer rank failed:\n{payload}")
        return out

    def close(self) -> None:
        for q in self.inbox:
            q.put(None)
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
        if dist.is_initialized():
            dist.destroy_process_group()


def _rank_main(rank: int, world: int, port: int, kwargs: dict, optimizer: dict, seed: int,
               inbox: Any, outbox: Any) -> None:
    import traceback

    torch.set_num_threads(1)
    try:
        learner = make_learner(**kwargs)
        learner.optimizer.load_state_dict(optimizer)
        init_group(rank, world, port)
        ddp = DDP(learner.net)
        window: list = []
        rng = np.random.default_rng([seed, rank])
        rows = max(1, learner.batch_size // world)
        while (task := inbox.get()) is not None:
            if task[0] == "generation":
                _, entry, size = task
                window = (window + [entry])[-size:]
                continue
            _, steps, updates = task
            learner.updates = updates  # the same learning rate as rank 0
            for _ in range(steps):
                learner.update(sample(window, rows, rng), model=ddp)
            outbox.put(("done", rank))
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001  (reported to the loop)
        outbox.put(("error", traceback.format_exc()))


def ddp_gradients(rank: int, world: int, port: int, kwargs: dict, state: dict,
                  batch: tuple, out: Any) -> None:
    """One rank's gradients after DDP's all-reduce, on its shard of `batch` (numpy arrays, rows split
    evenly, no augmentation, BN on running statistics): for the data-parallel test."""
    torch.set_num_threads(1)
    try:
        learner = make_learner(**kwargs)
        learner.net.load_state_dict(state)
        init_group(rank, world, port)
        ddp = DDP(learner.net)
        shard = tuple(torch.from_numpy(np.array_split(a, world)[rank]) for a in batch)
        loss, _ = learner.losses(shard, ddp, augmented=False, train=False)
        loss.backward()
        # numpy, not tensors: a tensor in a queue is shared through the sender, gone by then
        out.put((rank, {n: p.grad.numpy().copy() for n, p in learner.net.named_parameters()}))
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001  (reported to the loop)
        import traceback
        out.put((rank, traceback.format_exc()))
