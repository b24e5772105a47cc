"""The compiled update (`hetrl.compiled`): every learner of the registry updates the same
compiled as eager, checkpoints move between the two, and `compile=auto|true|false` decides
as it says. The numbers are checked through dynamo's `aot_eager` backend: the update traced
as one whole graph and its backward by AOT autograd, as inductor receives them, run with
eager kernels (seconds, where building inductor's kernels for every learner would take
minutes on 2 cores); one test builds real inductor kernels, and one runs the CUDA graph
where CUDA exists."""

from __future__ import annotations

import copy
import json
import multiprocessing
import os
import subprocess
import sys
from contextlib import nullcontext

import numpy as np
import pytest
import torch
from helpers import build_job, loss_scaling, tiny_go5

from hetrl.algos.base import Batch, Learner
from hetrl.compiled import toolchain
from hetrl.compiled.choose import choose_update, compiler, job_batch, update_compiler
from hetrl.compiled.scaling import GraphScaler
from hetrl.compiled.step import GraphStep
from hetrl.config.errors import ConfigError
from hetrl.options import compose_job, group_options
from hetrl.platform.measure import random_batch
from hetrl.partition.costs import Plan
from hetrl.partition.graph import Kind
from hetrl.precision.mixed import HardwareAwarePrecision
from hetrl.validation import validate

SMALL = {"alphazero": ("algo.width=16", "algo.blocks=1", "algo.batch_size=16"),
         "ppo": ("algo.hidden=[16]", "algo.n_steps=8", "algo.batch_size=16"),
         "a2c": ("algo.hidden=[16]", "algo.n_steps=8")}
"""Each learner small: a tiny network, a small batch. (AlphaZero at width 8 is chaotic on
these batches: eager against eager with one weight nudged by 3e-8 differs by 0.1 after 100
updates; at width 16, by 1e-6.)"""


def _one_graph(fn):
    """The update traced as one whole graph by dynamo and AOT autograd, run as traced (no
    kernels built), each form's graphs its own, as `compiler`'s are."""
    return torch.compile(fn, backend="aot_eager", fullgraph=True, dynamic=False,
                         isolate_recompiles=True)


def _learner(algo: str, *more: str) -> tuple[Learner, dict]:
    overrides = SMALL.get(algo, ("algo.hidden=[16]", "algo.batch_size=16"))
    c = build_job(f"algo={algo}", "tracking=none", *overrides, *more)
    c.envs.close()
    return c.learner, c.spaces


def _batches(learner: Learner, spaces: dict, n: int = 4) -> list:
    """Batches of the learner's kind; a replay's batches as a prioritized replay samples
    them (rows' slots, importance weights in (0, 1], some terminal rows), so the weighted
    losses and the TD errors handed back as priorities are compared too."""
    batches = [random_batch(learner, **spaces, n=learner.batch_size, device=learner.device,
                            seed=seed) for seed in range(n)]
    if not isinstance(batches[0], Batch):
        return batches
    rows = learner.batch_size
    draw = torch.Generator().manual_seed(0)
    return [b._replace(indices=np.arange(rows), weights=torch.rand(rows, generator=draw) + 0.01,
                       terminated=(torch.rand(b.terminated.shape, generator=draw) < 0.1).float())
            for b in batches]


def _train(learner: Learner, batches: list, updates: int, start: int = 0) -> list[dict]:
    """`updates` updates through the update step; the metrics of each."""
    metrics = []
    for u in range(start, start + updates):
        torch.manual_seed(u)  # the same draws (TD3's smoothing, MADDPG's Gumbel) either way
        metrics.append(learner.learn(batches[u % len(batches)]))
    return metrics


def _max_difference(a: Learner, b: Learner) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a.state_dict().values(),
                                                          b.state_dict().values())
               if torch.is_tensor(x) and x.is_floating_point())


UPDATES = 100
"""Enough for every form of each update to run many times (TD3's delayed actor, each of
MADDPG's trainers in turn) and for the learner to move well past the tolerance."""


@pytest.mark.parametrize("algo", group_options("algo"))
def test_every_learner_updates_the_same_compiled_and_eager(algo):
    learner, spaces = _learner(algo)
    eager, compiled = copy.deepcopy(learner), copy.deepcopy(learner)
    compiled.compiled_step = GraphStep(compiled, _one_graph)
    batches = _batches(learner, spaces)
    eager_metrics = _train(eager, batches, UPDATES)
    compiled_metrics = _train(compiled, batches, UPDATES)
    assert eager.updates == compiled.updates == UPDATES
    assert _max_difference(eager, compiled) < 1e-5
    assert _max_difference(eager, learner) > 1e-3  # it trained
    # every update's metrics alike: the TD errors handed back as new priorities (each update
    # of a replay's learner), a delayed stage's carried between its runs
    replayed = isinstance(batches[0], Batch)
    assert all(("td_errors" in m) == replayed for m in eager_metrics)
    for e, c in zip(eager_metrics, compiled_metrics):
        assert e.keys() == c.keys()
        assert all(torch.allclose(e[k], c[k], rtol=1e-4, atol=1e-5) for k in e), (e, c)


PLANNED = {"0": "float16", "2": "bfloat16"}
"""A per-layer plan for DQN's Q-network (4-16-2): its first layer in float16 (loss scaling),
its second in bfloat16 (its weights rounded to bfloat16 after each step), float32 between."""


def _mixed(learner: Learner) -> Learner:
    """`learner` in the PLANNED mixed plan, applied as a job applies its plan, the loss scale
    set to overflow at first and to grow every 3 clean steps."""
    graph = learner.task_graph(learner.batch_size)
    dtypes = [PLANNED.get(n.layer, "float32") if n.kind is not Kind.loss else "float32"
              for n in graph.nodes]
    n = len(graph.nodes)
    plan = Plan(["cpu"], [0] * n, [0.0] * n, [0.0] * n, 0.0, 0.0, "test", dtypes=dtypes)
    scaling = loss_scaling(init_scale=2.0**24, growth_interval=3)
    HardwareAwarePrecision(["bfloat16", "float16"], scaling, 1.0).apply(learner, graph, plan, None)
    return learner


def test_a_checkpoint_moves_from_eager_to_compiled_and_back_in_a_mixed_plan():
    """Per-layer float16 and bfloat16 with dynamic loss scaling: the compiled graph casts
    each layer where eager casts it, rounds the bfloat16 weights after each step as eager's
    step hook does, skips the same steps (torch.where, not a Python branch: the graph is
    whole), backs off and grows the scale as GradScaler does, on the GradScaler's own state,
    which the checkpoints carry between the legs."""
    learner, spaces = _learner("dqn")
    batches = _batches(learner, spaces)
    # a copy of an optimizer loses its step hooks: each leg gets the plan applied
    eager, *legs = (_mixed(copy.deepcopy(learner)) for _ in range(4))

    def scales(leg: Learner, start: int) -> list[tuple[float, int]]:
        """The scale and the skipped steps after each of 10 updates."""
        after = []
        for u in range(start, start + 10):
            _train(leg, batches, 1, start=u)
            after.append((leg.scaler.get_scale(), leg.skipped_steps))
        return after

    expected = scales(eager, 0) + scales(eager, 10) + scales(eager, 20)
    legs[1].compiled_step = GraphStep(legs[1], _one_graph)  # eager, compiled, eager
    seen = []
    for k, leg in enumerate(legs):
        if k:
            leg.restore(copy.deepcopy(legs[k - 1].checkpoint()))
        seen += scales(leg, 10 * k)
    assert seen == expected  # each update's scale and skipped steps, exactly
    compiled = [scale for scale, _ in expected[9:20]]
    assert any(b < a for a, b in zip(compiled, compiled[1:]))  # backed off, compiled
    assert any(b > a for a, b in zip(compiled, compiled[1:]))  # and grown
    assert 0 < expected[9][1] < expected[19][1] < 30
    assert legs[-1].scaler.state_dict() == eager.scaler.state_dict()  # its growth tracker
    weight = legs[-1].q[2].weight  # stepped by each leg, on bfloat16's grid
    assert torch.equal(weight, weight.bfloat16().float())
    # parameters: the 16-bit roundings happen in the same ops on values equal up to float32's
    # reordered reductions (the functional Adam's few ulps a step)
    assert legs[-1].updates == 30
    assert _max_difference(eager, legs[-1]) < 1e-5


def test_qat_compiles_into_a_graph_before_its_delay_and_one_after():
    """precision=qat (each layer's weight fake-quantized by a parametrization, its input by
    a pre-hook, both with straight-through gradients) traces into the update's one graph;
    at the delay the compiled update moves to its second graph, and each update lands where
    the eager one does."""
    def qat() -> tuple[Learner, dict]:  # apart: a copy reads the original's update count
        return _learner("dqn", "precision=qat", "precision.quant_delay=5", "precision.bits=4")

    (eager, spaces), (compiled, _) = qat(), qat()
    plain, _ = _learner("dqn")
    assert _max_difference(eager, compiled) == 0
    compiled.compiled_step = GraphStep(compiled, _one_graph)
    batches = _batches(eager, spaces)
    for leg in (eager, compiled, plain):
        _train(leg, batches, 12)
    assert len(compiled.compiled_step.fns) == 2  # fake quantization off, then on
    assert _max_difference(eager, compiled) < 1e-5
    # it quantized: the trained weights (QAT keeps them under its parametrization) moved apart
    qat_weights = {k.replace(".parametrizations.weight.original", ".weight"): v
                   for k, v in eager.state_dict().items()}
    assert max((qat_weights[k] - v).abs().max() for k, v in plain.state_dict().items()) > 1e-4


def test_the_graphs_loss_scale_follows_gradscalers_rule():
    """Factors whose products round in float32 (1.7, 0.3), and a scale that would grow past
    float32's range: the graph's arithmetic gives torch._amp_update_scale_'s (GradScaler's
    update) values bit for bit."""
    scaler = torch.amp.GradScaler("cpu", init_scale=3e38, growth_factor=1.7,
                                  backoff_factor=0.3, growth_interval=2)
    graph = GraphScaler(scaler, torch.device("cpu"))
    scale, tracker = (t.clone() for t in graph.state())
    ours, scales = (scale.clone(), tracker.clone()), []
    for overflow in [0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0]:
        found = torch.tensor(float(overflow))
        torch._amp_update_scale_(scale, tracker, found, 1.7, 0.3, 2)
        ours = graph.update(*ours, found.bool())
        assert torch.equal(ours[0], scale) and torch.equal(ours[1], tracker)
        scales.append(scale.item())
    assert scales[1] == scales[0]  # 3e38 * 1.7 is past float32: no growth to inf
    assert scales[6] > scales[4] > scales[2]  # grown after each 2 clean steps


def test_the_update_step_counts_updates_and_the_learner_does_not():
    learner, spaces = _learner("dqn")
    batch = _batches(learner, spaces, 1)[0]
    learner.update(batch)
    assert learner.updates == 0
    learner.learn(batch)
    assert learner.updates == 1


def _state(learner: Learner) -> dict:
    return copy.deepcopy({**learner.checkpoint(), "rng": torch.get_rng_state()})


def _assert_same_state(before: dict, learner: Learner) -> None:
    after = _state(learner)
    assert after["updates"] == before["updates"]
    assert torch.equal(after["rng"], before["rng"])
    for key, value in before["modules"].items():
        assert torch.equal(value, after["modules"][key]), key
    assert after["optimizers"] == before["optimizers"]  # no state: nothing stepped


def test_auto_stays_eager_at_once_where_the_budget_cannot_repay_a_compile():
    learner, spaces = _learner("dqn")
    before = _state(learner)
    choice = choose_update(learner, "auto", 50, job_batch(learner, spaces), nullcontext)
    assert not choice.compiled and learner.compiled_step is None
    assert "50 updates" in choice.reason and "less than compiling" in choice.reason
    assert set(choice.metrics()) == {"host/update_eager_s"}
    _assert_same_state(before, learner)  # timing the eager update trained nothing


def test_auto_times_the_update_without_training_the_job_on_its_probe(tmp_path, monkeypatch):
    """A budget worth weighing, on a machine that never compiled the update (an empty
    cache): eager, after timing the eager update, and the job's learner is as it was built
    (the probe batch is random: 20 Adam steps on it once cost DQN-CartPole with prioritized
    replay its learning, 108 against eager's 195)."""
    monkeypatch.setenv(toolchain.CACHE_ENV, str(tmp_path))
    learner, spaces = _learner("dqn")
    before = _state(learner)
    choice = choose_update(learner, "auto", 20_000, job_batch(learner, spaces), nullcontext)
    assert not choice.compiled and "not compiled on this machine yet" in choice.reason
    _assert_same_state(before, learner)


def test_without_a_compiler_auto_falls_back_and_true_fails_naming_it():
    from torch._inductor import config

    learner, spaces = _learner("dqn")
    batch = job_batch(learner, spaces)
    with config.patch({"cpp.cxx": (None, "no-such-c++")}):
        choice = choose_update(learner, "auto", 10**6, batch, nullcontext)
        assert not choice.compiled and "no-such-c++" in choice.reason
        with pytest.raises(ConfigError, match="compile=true .*no-such-c\\+\\+"):
            choose_update(learner, "true", 10**6, batch, nullcontext)


def test_a_bad_compile_value_names_the_valid_ones():
    cfg, choices = compose_job("compile=sometimes", "tracking=none")
    with pytest.raises(ConfigError, match="compile='sometimes'.*auto, true, false"):
        validate(cfg, choices)


def test_an_update_calls_its_kernels_from_cpp_unless_its_networks_convolve(monkeypatch):
    """The C++ wrapper where it measured faster (the MLPs), Python's for convolutions."""
    from hetrl.compiled import choose

    asked = []
    monkeypatch.setattr(choose, "compiler", lambda device, cpp_wrapper: asked.append(cpp_wrapper))
    update_compiler(_learner("dqn")[0])
    update_compiler(tiny_go5()[1])
    assert asked == [True, False]


@pytest.mark.slow
def test_inductor_builds_the_update_once_per_machine():
    """Real kernels, in the user's cache (as a job keeps them): a second learner of the same
    shapes, as the next job of a sweep, starts from the cache."""
    if why := toolchain.missing(torch.device("cpu")):
        pytest.skip(f"inductor cannot build here: {why}")
    learner, spaces = _learner("dqn")
    batches = _batches(learner, spaces)
    eager, again = copy.deepcopy(learner), copy.deepcopy(learner)
    first = choose_update(learner, "true", None, batches[0], nullcontext)
    assert first.compiled and learner.compiled_step is not None
    assert set(first.metrics()) == {"host/update_eager_s", "host/update_compiled_s",
                                    "host/compile_s"}
    _train(eager, batches, 20)
    _train(learner, batches, 20)
    assert _max_difference(eager, learner) < 1e-5
    assert any(toolchain.cache_dir().rglob("*.so"))  # the built kernels, kept
    second = choose_update(again, "true", None, batches[0], nullcontext)
    assert second.compile_s < max(10.0, first.compile_s / 2), (first, second)


FRESH_PROCESS = """
import json
import torch
from torch._dynamo.utils import counters
from torch._inductor import cpu_vec_isa
from hetrl.compiled.choose import compiler
probes, probe = [], cpu_vec_isa.VecISA._probe_load
cpu_vec_isa.VecISA._probe_load = lambda isa, path: probes.append(str(isa)) or probe(isa, path)
compiler(torch.device("cpu"))(lambda x: (x * 2).sum())(torch.ones(8))
isa = cpu_vec_isa.pick_vec_isa()
print(json.dumps({"probes": probes, "isa": str(isa), "flags": isa.build_arch_flags(),
                  "hits": counters["inductor"]["fxgraph_cache_hit"]}))
"""


def test_a_second_process_compiles_from_the_first_ones_caches(tmp_path):
    """As the next job of a sweep: a fresh process finds the first one's graph in hetrl's
    cache (the user's, set before its first lookup), and takes the first one's probes of the
    CPU's vector ISAs (a test library loaded in a new process, ~1 s of every process that
    compiles) instead of probing again, picking the same ISA with the same flags (AVX-512's
    bf16 among them)."""
    if why := toolchain.missing(torch.device("cpu")):
        pytest.skip(f"inductor cannot build here: {why}")
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path)

    def process() -> dict:
        out = subprocess.run([sys.executable, "-c", FRESH_PROCESS], env=env,
                             capture_output=True, text=True, check=True, timeout=300)
        return json.loads(out.stdout.splitlines()[-1])

    first, second = process(), process()
    assert first["hits"] == 0 and any((tmp_path / "hetrl" / "inductor").rglob("*.so"))
    assert second == {**first, "probes": [], "hits": 1}


def _records(first: int) -> None:
    for i in range(first, first + 100):
        toolchain.record(f"key {i}", i)


def test_jobs_that_record_at_once_each_keep_their_records(tmp_path, monkeypatch):
    """The records are read, changed and written whole: four jobs recording at the same time
    (as a sweep's jobs do) keep all 400, one at a time."""
    monkeypatch.setenv(toolchain.CACHE_ENV, str(tmp_path))
    jobs = [multiprocessing.get_context("fork").Process(target=_records, args=(100 * k,))
            for k in range(4)]
    for job in jobs:
        job.start()
    for job in jobs:
        job.join(timeout=60)
    assert [job.exitcode for job in jobs] == [0] * 4
    assert toolchain.records() == {f"key {i}": i for i in range(400)}


def test_aot_autograds_cache_keeps_a_graph_with_autocast_regions():
    """A precision plan's 16-bit layers are autocast regions in the update's graph. AOT
    autograd's cache refused a graph with them (an unknown function), so every job traced a
    mixed plan's update through AOT autograd again (its cached start 21 s, float32's 5 s)."""
    from torch._dynamo.utils import counters

    if why := toolchain.missing(torch.device("cpu")):
        pytest.skip(f"inductor cannot build here: {why}")

    def region(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
            y = torch.nn.functional.linear(x, w)
        return y.float().sum()

    counters.clear()
    compiled = compiler(torch.device("cpu"))(region)
    x, w = torch.randn(4, 3), torch.randn(5, 3)
    assert torch.allclose(compiled(x, w), region(x, w))
    aot = counters["aot_autograd"]
    assert aot["autograd_cache_bypass"] == 0, dict(aot)
    assert aot["autograd_cache_saved"] + aot["autograd_cache_hit"] == 1, dict(aot)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine: "
                    "the CUDA-graph capture of the compiled update needs one")
def test_on_cuda_the_compiled_update_runs_as_a_cuda_graph():
    c = build_job("algo=dqn", "tracking=none", "algo.hidden=[16]", "algo.batch_size=16",
                  "device=cuda")
    c.envs.close()
    learner, batches = c.learner, _batches(c.learner, c.spaces)
    assert learner.device.type == "cuda"
    eager = copy.deepcopy(learner)
    learner.compiled_step = GraphStep(learner, update_compiler(learner))
    _train(eager, batches, 20)
    _train(learner, batches, 20)
    torch.cuda.synchronize()
    assert _max_difference(eager, learner) < 1e-4
