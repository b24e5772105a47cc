"""The host platform is measured, not modeled: each node of the real step is timed."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import torch
from helpers import build_job, compose_job, computed_dtype, loss_scaling, mlflow_runs, run_job
from test_planning import strict_json

from hetrl import checkpoint, experiment
from hetrl.partition.graph import Kind, Pass
from hetrl.platform.measure import measure_step
from hetrl.precision.native import emulates
from hetrl.seeding import rng_states


def _learner(*overrides: str):
    c = build_job(*overrides)
    c.envs.close()
    return c.learner, tuple(c.spaces.values())


def _seconds(learner, spaces) -> dict[str, float]:
    graph = learner.task_graph(learner.batch_size)
    seconds = measure_step(learner, graph, *spaces, torch.device("cpu"), repeats=9)
    return {node.name: float(s) for node, s in zip(graph.nodes, seconds)}


def test_a_wide_layer_measures_far_slower_than_a_narrow_one():
    learner, spaces = _learner("algo=dqn", "algo.hidden=[1024,1024]", "algo.batch_size=256")
    seconds = _seconds(learner, spaces)
    wide, narrow = seconds["q/2.forward"], seconds["q/0.forward"]  # 1024x1024 vs 4x1024
    assert wide > narrow > 0  # 256x the FLOPs: the order holds on a loaded host, too
    assert seconds["q/2.backward"] > seconds["q/0.backward"] > 0
    assert seconds["q/2.update"] > seconds["q/0.update"] > 0  # by parameter count


def test_every_node_of_a_delayed_policy_update_is_timed_and_the_learner_is_untouched():
    learner, spaces = _learner("algo=td3", "env=pendulum", "algo.hidden=[32,32]")
    weights = {k: v.clone() for k, v in learner.state_dict().items() if torch.is_tensor(v)}
    rng = rng_states()
    seconds = _seconds(learner, spaces)
    assert all(s > 0 for s in seconds.values()), [n for n, s in seconds.items() if s <= 0]
    assert any(name.startswith("actor/") and name.endswith(".update") for name in seconds)
    assert all(torch.equal(v, learner.state_dict()[k]) for k, v in weights.items())
    assert learner.updates == 0
    assert torch.equal(rng["torch"], rng_states()["torch"])
    assert all(np.array_equal(a, b) for a, b in zip(rng["numpy"], rng_states()["numpy"]))


def test_a_host_job_logs_its_measured_plan_apart_from_modeled_figures(tmp_path, client):
    run_job(tmp_path, "algo=dqn", "steps=300", "algo.learning_starts=100", "log_every=100",
            "algo.hidden=[32,32]", "eval.final=0")
    (run,) = mlflow_runs(tmp_path)
    metrics = run.data.metrics
    assert metrics["host/plan_step_s"] > 0 and metrics["host/plan_eps"] > 0
    assert not any(k.startswith(("eps_platform", "platform/")) for k in metrics)
    path = client.download_artifacts(run.info.run_id, "plan.json", str(tmp_path))
    plan = json.loads(open(path).read())
    assert plan["costs"] == "measured"
    layer_passes = [n for n in plan["nodes"] if n["kind"] != Kind.loss.value]
    assert layer_passes and all(n["seconds"]["cpu"] > 0 for n in layer_passes)
    assert {Pass.forward.value, Pass.backward.value, Pass.update.value} <= {
        n["name"].rsplit(".", 1)[1].split("#")[0] for n in layer_passes}


# precision=mixed on the host: each layer in the dtype that measured fastest on its device


def _fake_costs(graph, bf16_for):
    """A timing table: every node 1 ms in float32; in bfloat16 0.2 ms for the layer passes
    of the networks `bf16_for` names, 1.5 ms (slower) for the others, 1 ms for the loss and
    optimizer nodes; float16 slower everywhere."""
    from hetrl.partition.costs import CostTable
    from hetrl.platform.host import per_layer_dtypes

    n = len(graph.nodes)
    fp32 = np.full((n, 1), 1e-3)
    bf16 = np.array([[1e-3 if node.kind is Kind.loss or node.pass_ is Pass.update
                      else 0.2e-3 if node.network in bf16_for else 1.5e-3]
                     for node in graph.nodes])
    by_dtype = {"float32": fp32, "bfloat16": bf16, "float16": np.full((n, 1), 9e-3)}
    seconds, chosen = per_layer_dtypes(graph, by_dtype, min_speedup=1.1)
    return CostTable(graph, ["cpu"], seconds, np.zeros((len(graph.edges), 1, 1)), {}, {},
                     dtypes=chosen, by_dtype=by_dtype)


def test_the_measured_plan_keeps_float32_where_float32_measured_faster():
    from hetrl.planning import plan_measured_step
    from hetrl.partition.single import SinglePartitioner

    c = build_job("algo=ddpg", "env=pendulum", "algo.hidden=[8,8]")  # not applied: fp32
    c.envs.close()
    graph = c.learner.task_graph(c.learner.batch_size)
    costs = _fake_costs(graph, bf16_for={"critic", "critic_target"})
    assert costs.by_dtype["bfloat16"].sum() < costs.by_dtype["float32"].sum()  # a candidate
    step = plan_measured_step(c.learner, c.platform, SinglePartitioner("cpu"), *c.spaces.values(),
                              costs=costs)
    layer = {(n.network, n.layer): d for n, d in zip(graph.nodes, step.plan.dtypes)
             if n.kind is not Kind.loss and n.pass_ is not Pass.update}
    assert {d for (net, _), d in layer.items() if net.startswith("critic")} == {"bfloat16"}
    assert {d for (net, _), d in layer.items() if net.startswith("actor")} == {"float32"}
    updates = [d for n, d in zip(graph.nodes, step.plan.dtypes) if n.kind in (Kind.loss,)
               or n.pass_ is Pass.update]
    assert set(updates) == {"float32"}  # the loss and the fp32 master weights' steps
    assert "float16" not in step.plan.dtypes  # its whole step measured slower: no candidate
    # the plan is faster than the whole step in float32, by the table
    assert step.metrics(c.learner.batch_size)["host/plan_speedup_vs_fp32"] > 1
    assert strict_json(step.to_json())["nodes"][0]["seconds_by_dtype"]["cpu"]["float16"] == 9e-3


def test_a_lower_precision_slower_than_float32_everywhere_leaves_every_layer_in_float32():
    c = build_job("algo=dqn", "algo.hidden=[8,8]")
    c.envs.close()
    graph = c.learner.task_graph(c.learner.batch_size)
    costs = _fake_costs(graph, bf16_for=set())
    assert {d for row in costs.dtypes for d in row} == {"float32"}
    assert np.array_equal(costs.seconds, costs.by_dtype["float32"])


def test_the_mixed_plan_applies_its_measured_dtypes_per_layer():
    from hetrl.planning import plan_measured_step
    from hetrl.partition.single import SinglePartitioner
    from hetrl.precision.mixed import HardwareAwarePrecision

    c = build_job("algo=ddpg", "env=pendulum", "algo.hidden=[8,8]")  # not applied: fp32
    c.envs.close()
    learner = c.learner
    graph = learner.task_graph(learner.batch_size)
    step = plan_measured_step(learner, c.platform, SinglePartitioner("cpu"), *c.spaces.values(),
                              costs=_fake_costs(graph, bf16_for={"critic"}))
    HardwareAwarePrecision(["bfloat16", "float16", "float32"], loss_scaling(), 1.0).apply(
        learner, graph, step.plan, c.platform)
    # the hooks pickle (an actor pool's processes take a pickled copy of the learner)
    twin = pickle.loads(pickle.dumps(learner))
    seen = {}
    for name in ("actor", "critic"):
        layer = getattr(learner, name).net[0]
        layer.register_forward_hook(
            lambda m, a, out, name=name: seen.__setitem__(name, computed_dtype(out)))
    obs = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    out = learner.critic(obs, learner.actor(obs))
    assert seen == {"actor": torch.float32, "critic": torch.bfloat16}
    assert out.dtype == torch.float32 and learner.scaler is None  # no float16: no loss scaling
    assert computed_dtype(out) == torch.bfloat16
    assert torch.equal(twin.critic(obs, twin.actor(obs)), out)  # the twin's hooks, too


def _critic_faster_in_bfloat16(monkeypatch) -> None:
    """Each layer pass of the host's step timed at 1 ms, the critic's at 0.5 ms in
    bfloat16: the per-layer plan is a candidate of its own (not one dtype throughout) on
    any CPU."""
    import hetrl.platform.host

    def measure_step(learner, graph, *args, dtype="float32", **kwargs):
        fast = {"bfloat16": 0.5, "float16": 2.0}.get(dtype, 1.0)
        return np.array([1e-3 * (fast if n.network == "critic" and n.layer_pass else 1.0)
                         for n in graph.nodes])

    monkeypatch.setattr(hetrl.platform.host, "measure_step", measure_step)


def _mixed_job_timed(monkeypatch, ms: dict[str, float], *overrides: str):
    """A precision=mixed DDPG job built where a whole update of each candidate measured
    `ms[name]` milliseconds (the per-layer plan, each dtype throughout, float32); the
    learners timed, by name."""
    import hetrl.build

    timed = {}

    def compare_updates(learners, *args, **kwargs):
        timed.update(learners)
        return {name: ms[name] / 1e3 for name in learners}

    monkeypatch.setattr(hetrl.build, "compare_updates", compare_updates)
    _critic_faster_in_bfloat16(monkeypatch)
    c = build_job("algo=ddpg", "env=pendulum", "algo.hidden=[8,8]", "precision=mixed",
                  "compile=false", "platform.reuse_plan=false", *overrides,
                  plan=True)  # the update as planned, eager; the fake timings not recorded
    c.envs.close()
    return c, timed


def _layer_dtypes(step) -> set[str]:
    return {d for n, d in zip(step.graph.nodes, step.plan.dtypes)
            if n.kind is not Kind.loss and n.pass_ is not Pass.update}


def test_a_mixed_plan_slower_than_float32_falls_back_to_float32(monkeypatch):
    c, _ = _mixed_job_timed(monkeypatch, {"per layer": 20, "bfloat16": 30, "float16": 30,
                                          "float32": 10})
    assert set(c.step_plan.plan.dtypes) == {"float32"}
    metrics = c.step_plan.metrics(c.learner.batch_size)
    assert metrics["host/speedup_vs_fp32"] == 1.0  # the same computation as float32's
    assert not any("forward" in vars(m) for m in c.learner.critic.modules())  # nothing cast


def test_mixed_computes_in_one_dtype_throughout_where_that_measured_fastest(monkeypatch):
    """The per-layer choice times each layer alone; the whole update in one 16-bit dtype
    (no casts between layers) is timed beside it, and wins where it is faster."""
    c, timed = _mixed_job_timed(monkeypatch, {"per layer": 9, "bfloat16": 8, "float16": 12,
                                              "float32": 10})
    natives = [d for d in ("bfloat16", "float16") if not emulates("cpu", getattr(torch, d))]
    assert set(timed) == {"per layer", *natives, "float32"}
    if "bfloat16" not in natives:
        pytest.skip("this CPU has no bfloat16 instructions: no bfloat16 candidate")
    assert _layer_dtypes(c.step_plan) == {"bfloat16"}
    updates = {d for n, d in zip(c.step_plan.graph.nodes, c.step_plan.plan.dtypes)
               if n.kind is Kind.loss or n.pass_ is Pass.update}
    assert updates == {"float32"}  # the loss and the fp32 master weights' steps
    metrics = c.step_plan.metrics(c.learner.batch_size)
    assert metrics["host/speedup_vs_fp32"] == pytest.approx(10 / 8)
    obs = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    out = c.learner.critic(obs, c.learner.actor(obs))
    assert computed_dtype(out) == torch.bfloat16 and out.dtype == torch.float32
    # one region around each network, no hooks on its layers
    assert all("forward" not in vars(m) for m in c.learner.critic.net)
    assert c.learner.scaler is None  # no float16: no loss scaling


def test_mixed_keeps_the_per_layer_plan_where_it_measured_fastest(monkeypatch):
    c, timed = _mixed_job_timed(monkeypatch, {"per layer": 7, "bfloat16": 8, "float16": 12,
                                              "float32": 10})
    per_layer = c.step_plan.costs.dtypes  # as measured on the host's one device
    assert "per layer" in timed and {"bfloat16", "float32"} <= set(_layer_dtypes(c.step_plan))
    assert c.step_plan.plan.dtypes == [row[0] for row in per_layer]
    assert c.step_plan.metrics(c.learner.batch_size)["host/speedup_vs_fp32"] == pytest.approx(
        10 / 7)


def test_a_per_layer_plan_all_in_float32_is_timed_once_as_float32(monkeypatch):
    """Where no layer is chosen in 16 bits (here: none is 1000x faster), the per-layer plan
    is the float32 candidate; timed twice, noise could call the same computation faster."""
    c, timed = _mixed_job_timed(monkeypatch, {"per layer": 5, "bfloat16": 30, "float16": 30,
                                              "float32": 10}, "precision.min_speedup=1000")
    assert "per layer" not in timed and "float32" in timed
    assert set(c.step_plan.applied.dtypes) == {"float32"}
    assert c.step_plan.metrics(c.learner.batch_size)["host/speedup_vs_fp32"] == 1.0


def test_a_resumed_mixed_job_computes_in_the_dtypes_it_chose_not_in_a_new_choice(
        tmp_path, monkeypatch):
    """On the host, mixed's choice stands on timings: timed again on resume, the job could
    go on in other dtypes than those it trained in. It follows its checkpoint's plan."""
    import hetrl.build

    timings = []

    def compare_updates(learners, *args, **kwargs):
        timings.append(set(learners))
        fastest = "per layer" if len(timings) == 1 else "float32"
        return {name: 0.005 if name == fastest else 0.01 for name in learners}

    monkeypatch.setattr(hetrl.build, "compare_updates", compare_updates)
    _critic_faster_in_bfloat16(monkeypatch)
    job = ("tracking=none", "algo=ddpg", "env=pendulum", "algo.hidden=[8,8]",
           "algo.batch_size=16", "algo.learning_starts=50", "precision=mixed", "log_every=100",
           "reference=find", "eval.final=0",  # no fp32 twin, no final evaluation: not checked
           "platform.reuse_plan=false")  # the fake timings not recorded
    cfg, choices = compose_job(*job, "steps=100")
    (tmp_path / "job").mkdir()
    experiment.run(cfg, choices, tmp_path / "job")
    first = checkpoint.load(tmp_path / "job")["step_plan"]
    assert len(timings) == 1 and first.applied.dtypes == [row[0] for row in first.costs.dtypes]
    assert set(first.applied.dtypes) == {"bfloat16", "float32"}

    cfg, choices = compose_job("tracking=none", f"resume={tmp_path / 'job'}", "steps=200")
    experiment.run(cfg, choices, tmp_path / "job", overrides=["steps=200"])
    resumed = checkpoint.load(tmp_path / "job")
    assert resumed["loop"].step == 200 and len(timings) == 1  # not planned nor timed again
    assert resumed["step_plan"].applied.dtypes == first.applied.dtypes
    assert resumed["step_plan"].update_s == first.update_s


def test_a_16_bit_precision_slower_than_float32_warns_with_the_measured_slowdown(monkeypatch,
                                                                               caplog):
    import hetrl.build

    monkeypatch.setattr(hetrl.build, "compare_updates",
                        lambda learners, *a, **k: {"precision": 0.1, "float32": 0.01})
    with caplog.at_level("WARNING", logger="hetrl"):
        c = build_job("algo=ddpg", "env=pendulum", "algo.hidden=[8,8]", "precision=fp16",
                      "compile=false", "platform.reuse_plan=false", plan=True)
    c.envs.close()
    (record,) = [r for r in caplog.records if "slower than float32" in r.getMessage()]
    assert "float16 computes an update of DDPG 10.0x slower" in record.getMessage()
    assert "100.0 ms vs 10.0 ms" in record.getMessage()
    assert c.step_plan.metrics(c.learner.batch_size)["host/speedup_vs_fp32"] == pytest.approx(0.1)


def test_a_ddpg_job_with_mixed_precision_runs_on_the_host(tmp_path, client):
    run_job(tmp_path, "algo=ddpg", "env=pendulum", "precision=mixed", "steps=300",
            "algo.learning_starts=100", "log_every=100", "algo.hidden=[32,32]",
            "algo.batch_size=32", "eval.final=0")
    runs = {r.data.tags["precision"]: r for r in mlflow_runs(tmp_path)}
    assert set(runs) == {"mixed", "fp32"}  # the fp32 twin, for the reward error
    run = runs["mixed"]
    assert run.info.status == "FINISHED" and run.data.metrics["reward_error_pct"] >= 0
    metrics = run.data.metrics
    assert metrics["host/speedup_vs_fp32"] > 0 and metrics["host/update_fp32_s"] > 0
    assert "host/plan_speedup_vs_fp32" in metrics
    assert not any(k.startswith(("speedup_vs", "platform/")) for k in metrics)  # not modeled
    plan = strict_json(open(client.download_artifacts(run.info.run_id, "plan.json",
                                                      str(tmp_path))).read())
    assert {n["dtype"] for n in plan["nodes"]} <= {"float32", "bfloat16", "float16"}
    assert all(set(n["seconds_by_dtype"]["cpu"]) == {"float32", "bfloat16", "float16"}
               for n in plan["nodes"])


def test_a_later_job_of_the_same_step_trains_in_the_plan_the_first_one_measured(
        tmp_path, monkeypatch):
    """Timed again, near ties choose by noise: each job of a sweep would compute in other
    dtypes and compile another graph. The first job's plan is recorded on this machine."""
    import hetrl.platform.host

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # an empty record of this test's own
    measured = []
    real = hetrl.platform.host.measure_step
    monkeypatch.setattr(hetrl.platform.host, "measure_step",
                        lambda *a, **k: measured.append(k["dtype"]) or real(*a, **k))
    job = ("algo=ddpg", "env=pendulum", "algo.hidden=[8,8]", "precision=mixed", "compile=false")

    def planned(*overrides: str):
        c = build_job(*job, *overrides, plan=True)
        c.envs.close()
        return c.step_plan

    first = planned()
    assert measured and list(tmp_path.glob("hetrl/host-plans/*.pt"))
    measured.clear()
    second = planned()
    assert not measured  # not timed again
    assert np.array_equal(second.costs.seconds, first.costs.seconds)  # no two timings are
    assert second.applied.dtypes == first.applied.dtypes and second.update_s == first.update_s

    again = planned("platform.reuse_plan=false")
    assert measured and not np.array_equal(again.costs.seconds, first.costs.seconds)
    measured.clear()
    assert np.array_equal(planned().costs.seconds, first.costs.seconds)  # not overwritten
    assert planned("algo.hidden=[16,16]") and measured  # another step: its own plan
