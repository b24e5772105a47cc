"""Each process that computes flushes subnormal floats to zero (hetrl.runtime)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from helpers import build_job

from hetrl.actors.worker import ActorWorker, cpu_copy
from hetrl.quant.spec import QuantSpec
from hetrl.runtime import flushes_subnormals


@pytest.fixture
def subnormals_kept() -> Iterator[None]:
    """This thread computes subnormals (torch's default) until the code under test acts."""
    torch.set_flush_denormal(False)
    assert not flushes_subnormals()
    yield
    torch.set_flush_denormal(True)  # as every other test's jobs leave this process


@pytest.mark.parametrize("overrides", [("algo=dqn",), ("algo=ddpg", "platform=versal")])
def test_a_jobs_learner_flushes_subnormals(subnormals_kept: None, overrides: tuple[str, ...]):
    build_job(*overrides, "algo.hidden=[8]")
    assert flushes_subnormals()


def test_an_actor_worker_flushes_subnormals(subnormals_kept: None):
    c = build_job("algo=dqn", "algo.hidden=[8]")
    torch.set_flush_denormal(False)  # as in a fresh actor process
    ActorWorker(0, 1, cpu_copy(c.learner), c.make_envs, seed=0, spec=QuantSpec())
    assert flushes_subnormals()
