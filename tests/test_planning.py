"""A job on a modeled platform plans its real training step, runs each layer in the dtype of
its device, and logs modeled figures apart from measured ones."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import build_job, computed_dtype, mlflow_runs, run_job

from hetrl.config.errors import ConfigError
from hetrl.partition.graph import Kind, Pass
from hetrl.partition.objective import objective, resource_violations
from hetrl.partition.single import SinglePartitioner

TINY = ("steps=300", "algo.learning_starts=100", "algo.train_freq=4", "algo.gradient_steps=1",
        "algo.hidden=[32,32]", "algo.batch_size=32", "log_every=100", "eval.final=0")
"""A job that trains a little; no final greedy evaluation (no test of planning reads it)."""


def _planned(*overrides: str):
    """The learner (the precision policy applied by its plan), platform, precision, plan;
    its update left eager (compile=false: whether compiling would pay is not planning's)."""
    c = build_job(*overrides, "compile=false", plan=True)
    return c.learner, c.platform, c.precision, c.step_plan


def test_a_versal_mixed_job_logs_the_plan_and_modeled_figures(tmp_path, client):
    result = run_job(tmp_path, "algo=dqn", "platform=versal", "precision=mixed", *TINY)
    runs = {r.data.tags["precision"]: r for r in mlflow_runs(tmp_path)}
    assert set(runs) == {"mixed", "fp32"}  # the fp32 twin was trained for the reward error
    run = runs["mixed"]
    assert run.info.status == "FINISHED" and run.data.metrics["reward_error_pct"] >= 0
    assert run.data.tags["platform"] == "versal" and run.data.tags["partitioner"] == "ilp"
    metrics = run.data.metrics
    assert metrics["eps_platform"] > 0 and metrics["eps_host"] > 0  # modeled beside measured
    assert {"speedup_vs_pl_only", "speedup_vs_aie_only", "speedup_vs_fixar"} <= set(metrics)
    assert result["eps_platform"] == pytest.approx(32 / metrics["platform/step_s"])
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"plan.json", "plan_gantt.png"} <= artifacts
    plan = json.loads(open(client.download_artifacts(run.info.run_id, "plan.json",
                                                     str(tmp_path))).read())
    assert sum(metrics[f"platform/nodes_{d}"] for d in ("ps", "pl", "aie")) == len(plan["nodes"])
    assert {n["device"] for n in plan["nodes"]} <= {"ps", "pl", "aie"}
    for each in runs.values():
        _json_artifacts(client, each.info.run_id, tmp_path)


def test_a_versal_composer_job_writes_its_matrix_as_strict_json(tmp_path, client):
    run_job(tmp_path, "algo=dqn", "platform=versal", "partitioner=composer", *TINY)
    (run,) = mlflow_runs(tmp_path)
    artifacts = _json_artifacts(client, run.info.run_id, tmp_path)
    matrix = artifacts["composer/matrix.json"]  # a device that cannot host a primitive: null
    assert any(value is None for row in matrix for value in row.values())


def _json_artifacts(client, run_id: str, tmp_path: Path) -> dict[str, object]:
    """Every JSON artifact of the run, each read by a strict parser (no Infinity, no NaN)."""
    return {path: strict_json(Path(client.download_artifacts(run_id, path, str(tmp_path)))
                              .read_text())
            for path in _artifact_paths(client, run_id) if path.endswith(".json")}


def _artifact_paths(client, run_id: str, under: str | None = None) -> list[str]:
    paths = []
    for artifact in client.list_artifacts(run_id, under):
        paths += _artifact_paths(client, run_id, artifact.path) if artifact.is_dir else [
            artifact.path]
    return paths


def strict_json(text: str):
    """json.loads that rejects the non-JSON constants NaN, Infinity and -Infinity."""
    def reject(constant: str):
        raise ValueError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=reject)


def test_plan_json_writes_unbounded_figures_as_null():
    *_, step = _planned("algo=dqn", "platform=versal", "precision=mixed")
    assert any(not np.isfinite(s) for s in np.ravel(step.costs.seconds))  # some device cannot
    plan = strict_json(step.to_json())
    assert any(None in node["seconds"].values() for node in plan["nodes"])


def test_a_baseline_on_slower_fabric_is_data():
    """versal.yaml's FIXAR baseline: the PL at 164/245 of its clock, at its 16-bit
    fixed-point rate, no masters (D.1 #16)."""
    learner, platform, precision, step = _planned("algo=ddpg", "platform=versal",
                                                  "precision=mixed", "algo.hidden=[400,300]")
    spec = platform.baselines["fixar"]
    assert (spec.device, spec.dtype.value, spec.master_weight_sync) == ("pl", "int16", False)
    assert spec.clock == pytest.approx(164 / 245, abs=1e-4)
    slow = platform.clocked("pl", spec.clock).cost_table(
        step.graph, lambda node, device: "int16", master_weight_sync=False)
    fixar = step.baselines["fixar"]
    assert fixar.makespan == pytest.approx(
        SinglePartitioner("pl").partition(slow).makespan, rel=1e-12)


def test_mixed_runs_each_layer_in_the_dtype_of_its_device():
    learner, platform, precision, step = _planned("algo=ddpg", "platform=versal",
                                                  "precision=mixed", "algo.hidden=[64,64]")
    expected = {"ps": torch.float32, "pl": torch.float16, "aie": torch.bfloat16}
    seen: dict[tuple[str, str], torch.dtype] = {}
    layers = [(n, step.plan.devices[k]) for n, k in zip(step.graph.nodes, step.plan.assignment)
              if n.pass_ is Pass.forward and n.kind is Kind.matmul and not n.name.endswith("#1")]
    for node, _ in layers:
        module = getattr(learner, node.network).get_submodule(node.layer)
        module.register_forward_hook(
            lambda m, a, out, key=(node.network, node.layer):
            seen.__setitem__(key, computed_dtype(out)))
    obs = torch.randn(4, 3)
    learner.critic(obs, learner.actor(obs))
    learner.critic_target(obs, learner.actor_target(obs))
    assert {(n.network, n.layer): expected[d] for n, d in layers} == seen
    assert len(set(seen.values())) > 1  # the plan really mixes devices
    assert (learner.scaler is not None) == (torch.float16 in seen.values())


VERSAL = ("platform=versal", "precision=mixed")


@pytest.mark.parametrize("job", [
    ("algo=dqn", "algo.hidden=[64,64]", "algo.batch_size=64", *VERSAL),
    ("algo=ddpg", "env=lunarlander_continuous", "algo.batch_size=1024", *VERSAL),
    ("algo=alphazero", "env=go9", "platform=cpu_dsp"),
    ("algo=alphazero", "env=go9", "algo.width=64", "algo.blocks=9", "platform=cpu_dsp"),
])
def test_the_ilp_beats_or_ties_every_single_device_plan(job):
    *_, step = _planned(*job)
    costs = step.costs
    best = step.plan.objective  # the ILP's bound, ≤ the objective of any assignment
    assert best <= objective(costs, step.plan.assignment) * (1 + 1e-6)
    for k in range(len(costs.devices)):
        allowed = np.isfinite(costs.seconds)
        single = [k if allowed[i, k] else int(np.argmin(costs.seconds[i]))
                  for i in range(len(costs.graph.nodes))]
        assert best <= objective(costs, single) * (1 + 1e-6)
    assert step.plan.makespan >= step.plan.objective * (1 - 1e-9)


@pytest.mark.parametrize("job", [("algo=dqn",), ("algo=ddpg", "algo.hidden=[400,300]")])
def test_pl_luts_taken_by_aie_nodes_count_against_the_pl(job):
    """Spec A.2.5: an AIE node takes PL LUTs for its PLIO movers. With the PL cut to 2,500 LUTs
    the plan's nodes take at most that in all, and the AIE-only baseline does not fit."""
    *_, step = _planned(*job, "platform=versal", "precision=mixed",
                        "platform.devices.pl.capacity.lut=2500")
    costs, plan = step.costs, step.plan
    assert plan.status.startswith("Optimal")
    luts = sum(costs.usage["lut"][i, k] for i, k in enumerate(plan.assignment))
    assert luts <= costs.capacity["lut"] == 2500
    assert resource_violations(costs, plan.assignment) == []
    aie_only = SinglePartitioner("aie").partition(costs)
    assert aie_only.status.startswith("resource-infeasible: lut")


def test_a_lut_budget_that_no_plan_fits_is_reported_infeasible():
    """With the PS kept from matmuls, every matmul takes ≥ 1,000 PL LUTs on the PL or the AIE:
    2,500 fit no DQN step."""
    with pytest.raises(ValueError, match="resource capacities"):
        _planned("algo=dqn", "platform=versal", "precision=mixed",
                 "platform.devices.pl.capacity.lut=2500",
                 "platform.devices.ps.runs=[elementwise,loss,optimizer]")


@pytest.mark.parametrize("job,match", [
    (("algo=dqn", "platform.measure_layers=false"),
     r"platform.measure_layers=false is invalid.*choose platform from \[.*'versal'"),
    (("algo=maddpg",), r"algo=maddpg describes no task graph.*choose algo from \[.*'ddpg'"),
])
def test_mixed_precision_on_a_host_with_no_plan_fails_and_names_what_to_choose(tmp_path, job,
                                                                               match):
    """The host plans mixed precision from its measured layers: without them (no measuring,
    a learner with no task graph) it has no plan to follow."""
    with pytest.raises(ConfigError, match=match):
        run_job(tmp_path, *job, "precision=mixed", *TINY, ready_store=False)
    assert not (tmp_path / "mlflow.db").exists()  # rejected before a run (or store) is made


def test_alphazero_plans_its_training_step_on_the_cpu_dsp_node(tmp_path, client):
    """MiniGo's node (C.2): the AlphaZero step on 9x9 (width 32, 2 blocks, batch 64) puts
    every conv3x3 of the residual tower, forward and backward, on the DSP cluster; its 2 ms
    launch keeps BN, ReLU, the 1x1 head convs and the small FCs on the ARM CPU (shared
    memory: switching costs nothing). The ILP's plan beats the CPU alone and the DSP alone."""
    _, _, _, step = _planned("algo=alphazero", "env=go9", "platform=cpu_dsp")
    graph, plan = step.graph, step.plan
    assert plan.status.startswith("Optimal")
    device = {node.name: plan.devices[k] for node, k in zip(graph.nodes, plan.assignment)}
    tower = [n.name for n in graph.nodes
             if n.kind is Kind.matmul and ".conv" in n.name and n.pass_ is not Pass.update]
    assert len(tower) == 2 * 2 * 2  # 2 blocks x 2 convs x (forward, backward)
    assert {device[name] for name in tower} == {"dsp"}
    norms = [n.name for n in graph.nodes if ".bn" in n.name or ".relu" in n.name]
    assert {device[name] for name in norms} == {"cpu"}
    assert set(step.baselines) == {"cpu_only", "dsp_only"}
    for baseline in step.baselines.values():
        assert plan.makespan <= baseline.makespan * (1 + 1e-9)
    assert plan.makespan < 0.7 * step.baselines["cpu_only"].makespan

    result = run_job(tmp_path, "algo=alphazero", "env=go9", "platform=cpu_dsp",
                     "algo.width=8", "algo.blocks=1", "algo.search.readouts=4",
                     "algo.search.fast_readouts=2", "selfplay.games_per_generation=2",
                     "selfplay.concurrent_games=2", "selfplay.generations=1",
                     "selfplay.train_steps=2", "selfplay.eval_games=2",
                     "selfplay.eval_readouts=2", "selfplay.gating_games=0", "steps=40")
    (run,) = mlflow_runs(tmp_path)
    metrics = run.data.metrics
    assert result["updates"] == 2 and metrics["eps_platform"] > 0
    assert {"speedup_vs_cpu_only", "speedup_vs_dsp_only", "platform/nodes_cpu"} <= set(metrics)
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"plan.json", "plan_gantt.png"} <= artifacts
