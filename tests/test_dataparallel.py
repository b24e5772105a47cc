"""Data-parallel trainers: 2-process DDP gradients over gloo equal one process's on the same
global batch, through the communication hook that times the all-reduce; the hook's figures."""

from __future__ import annotations

import queue
import shutil
import time
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from hetrl.algos.alphazero import make_learner
from hetrl.scheduler.dataparallel import ddp_gradients, rendezvous_file, union_seconds

KWARGS = {"obs_shape": (12, 5, 5), "num_actions": 26, "width": 8, "blocks": 1, "batch_size": 8,
              "lr_values": [0.01], "lr_boundaries": [], "momentum": 0.9, "l2": 1e-4, "value_weight": 0.5,
              "search": {}}


def test_two_rank_ddp_gradients_equal_one_process():
    torch.manual_seed(0)
    learner = make_learner(**KWARGS)
    batch = ((torch.rand(8, 12, 5, 5) > 0.5).to(torch.uint8),
             torch.softmax(torch.randn(8, 26), dim=1), torch.sign(torch.randn(8)))
    loss, _ = learner.losses(batch, augmented=False, train=False)
    loss.backward()
    want = {n: p.grad.clone() for n, p in learner.net.named_parameters()}

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    rendezvous = rendezvous_file()
    state = learner.net.state_dict()
    arrays = tuple(t.numpy() for t in batch)
    procs = [ctx.Process(target=ddp_gradients, args=(rank, 2, rendezvous, KWARGS, state, arrays, out))
             for rank in range(2)]
    for p in procs:
        p.start()
    got, deadline = {}, time.monotonic() + 600  # spawning two torch processes on a loaded host
    try:
        while len(got) < len(procs):
            assert time.monotonic() < deadline, f"ranks {set(range(2)) - set(got)} never reported"
            try:
                rank, result = out.get(timeout=5)
                got[rank] = result
            except queue.Empty:  # a loaded host is slow; a rank that died is a failure
                dead = [p.exitcode for p in procs if not p.is_alive() and p.exitcode != 0]
                assert not dead, f"a rank died without reporting (exit codes {dead})"
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
        shutil.rmtree(Path(rendezvous).parent, ignore_errors=True)
    params = sum(p.numel() for p in learner.net.parameters())
    for rank in range(2):
        assert isinstance(got[rank], tuple), got[rank]
        grads, comm = got[rank]
        for name, grad in want.items():
            torch.testing.assert_close(torch.from_numpy(grads[name]), grad, rtol=1e-5,
                                       atol=1e-6)
        assert comm["bytes"] == 4 * params  # every float32 gradient, all-reduced once
        assert comm["buckets"] >= 1 and comm["seconds"] > 0


def test_the_all_reduce_time_counts_overlapping_buckets_once():
    assert union_seconds([]) == 0.0
    assert union_seconds([(0.0, 1.0), (0.5, 2.0), (3.0, 3.5)]) == pytest.approx(2.5)
    assert union_seconds([(1.0, 4.0), (2.0, 3.0)]) == pytest.approx(3.0)
