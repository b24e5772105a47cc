"""The host platform is measured, not modeled: each node of the real step is timed."""

from __future__ import annotations

import json

import numpy as np
import torch
from helpers import build_job, mlflow_runs, run_job

from hetrl.partition.graph import Kind, Pass
from hetrl.platform.measure import measure_step
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
            "algo.hidden=[32,32]")
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
