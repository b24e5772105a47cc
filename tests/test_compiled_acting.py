"""The compiled acting path (`hetrl.compiled.acting`): an actor pool's policy forward compiles
by the update's rule, acts as the eager one across weight pulls without recompiling, and
never compiles under compile=false. Traced with dynamo's `aot_eager` backend (the graph run
as traced, no kernels built: seconds)."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch
from helpers import build_job
from torch._dynamo.utils import counters

from hetrl.actors.weights import QuantizeOn, publish
from hetrl.actors.worker import ActorWorker, cpu_copy
from hetrl.algos.networks import network
from hetrl.compiled import acting, toolchain
from hetrl.compiled.acting import choose_acting
from hetrl.quant import QuantSpec

SMALL = ("algo=dqn", "env=cartpole", "algo.hidden=[16]", "tracking=none")


@pytest.fixture
def traced(monkeypatch):
    """aot_eager for the acting forward, and dynamo's caches and counters emptied."""
    monkeypatch.setattr(acting, "BACKEND", "aot_eager")
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def _graphs() -> int:
    """The graphs dynamo has captured (a recompile captures one more)."""
    return counters["stats"]["unique_graphs"]


def test_the_compiled_policy_acts_as_the_eager_one_across_a_pull(traced):
    """fp32 to the bit, int8 (`paper`: fake quant, the int8 that traces) the same greedy
    actions; the forward is compiled once, in the actor, and no pull recompiles it."""
    c = build_job(*SMALL)
    c.envs.close()
    learner = c.learner
    learner.compile_acting = True  # what build sets where compile chose it
    for precision, int8_mode in (("fp32", "kernel"), ("int8", "paper")):
        spec = QuantSpec(precision, int8_mode)
        graphs = _graphs()
        worker = ActorWorker(0, 1, cpu_copy(learner), c.make_envs, seed=0, spec=spec)
        assert worker.acting is not worker.policy
        chunk = worker.collect(None, steps=3, step=10**6, pull_s=0.0)  # greedy: the net acts
        assert _graphs() == graphs + 1  # the envs were stepped through the compiled forward
        with torch.inference_mode():  # as the learner's `act` makes its input
            obs = torch.as_tensor(chunk.obs[:1, 0])
        for _ in range(2):  # before and after a pull of new weights
            with torch.inference_mode():
                compiled, eager = worker.acting(obs), worker.policy(obs)
            if precision == "fp32":
                assert torch.equal(compiled, eager)
            else:
                assert torch.equal(compiled.argmax(1), eager.argmax(1))
                assert torch.allclose(compiled, eager, atol=1e-6)
            with torch.no_grad():
                for p in learner.policy().parameters():
                    p.add_(torch.randn_like(p) * 0.5)
            worker.load(publish(learner.policy(), spec, QuantizeOn.actor))
            with torch.inference_mode():
                assert not torch.equal(worker.acting(obs), compiled)  # the pull reached it
        worker.collect(None, steps=3, step=10**6, pull_s=0.0)
        assert _graphs() == graphs + 1  # no pull recompiled it
        worker.close()


def test_compile_false_never_compiles_the_acting_path(traced):
    c = build_job(*SMALL, "scheduler=actorq", "compile=false", "platform.measure_layers=false",
                  plan=True)
    c.envs.close()
    assert not c.acting_choice.compiled and c.acting_choice.line() == (
        "compile=false: eager acting (as asked)")
    worker = ActorWorker(0, 1, cpu_copy(c.learner), c.make_envs, seed=0, spec=QuantSpec())
    assert worker.acting is worker.policy
    worker.collect(None, steps=3, step=10**6, pull_s=0.0)
    assert _graphs() == 0
    worker.close()


def test_int8_kernels_act_eager_naming_why_and_fp32_acts_compiled_only_where_faster(
        traced, tmp_path, monkeypatch):
    """compile=true asks for the compiled update: the acting forward, timed both ways,
    compiles only where that measured faster (a slower forward in every actor only costs)."""
    monkeypatch.setenv(toolchain.CACHE_ENV, str(tmp_path))  # its records: not this machine's
    policy, obs = network(gym.spaces.Box(-1, 1, (4,)), [16], 2), torch.zeros(1, 4)
    kernels = choose_acting(policy, QuantSpec("int8", "kernel"), obs, "true", 10**6, 2)
    assert not kernels.compiled and "int8-kernel-pc policy" in kernels.reason
    assert "TorchScript object" in kernels.reason
    assert set(kernels.metrics()) == {"host/act_eager_s"}
    fp32 = choose_acting(policy, QuantSpec(), obs, "true", 10**6, 2)
    assert fp32.compiled == (fp32.compiled_s < fp32.eager_s)
    assert fp32.line().startswith("compile=true: compiled acting (" if fp32.compiled else
                                  "compile=true: eager acting (compiled is no faster here")
    assert set(fp32.metrics()) == {"host/act_eager_s", "host/act_compiled_s",
                                   "host/act_compile_s"}
