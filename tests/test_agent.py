"""A trained agent out of a run: `hetrl.load` (folder, files, MLflow run), the end summary's
greedy evaluation, `python -m hetrl.evaluate` with its video, and the policy as an MLflow
model (loaded by pyfunc, served by `mlflow models serve`)."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch
from helpers import run_job, tracking_uri
from mlflow.tracking import MlflowClient

import hetrl
import hetrl.envs
from hetrl import checkpoint, experiment
from hetrl.config.errors import ConfigError
from hetrl.evaluate import main as evaluate_main
from hetrl.platform.host import HostPlatform
from hetrl.seeding import rng_states

JOB = ("algo=dqn", "steps=400", "algo.learning_starts=100", "algo.train_freq=4",
       "algo.gradient_steps=1", "algo.hidden=[16,16]", "algo.batch_size=16", "log_every=100",
       "eval.every=200", "eval.episodes=2", "eval.final=4", "platform.measure_layers=false")
"""A tiny job: 75 updates of one gradient step (the tuned DQN's 128 a round are not what is
loaded)."""


@pytest.fixture(scope="module")
def made() -> Counter[str]:
    """What the job made: "platforms", "envs", and "envs" once build() returned ("built")."""
    return Counter()


@pytest.fixture(scope="module")
def job(tmp_path_factory, made):
    """One tiny tracked DQN-CartPole job: its folder, final metrics and store's folder."""
    store = tmp_path_factory.mktemp("agent")
    with pytest.MonkeyPatch.context() as patch:  # counted, as `made` says
        def counted(what: str, make: Callable) -> Callable:
            def make_counted(*args, **kwargs):
                made[what] += 1
                out = make(*args, **kwargs)
                if what == "builds":
                    made["built"] = made["envs"]  # before the evaluations make theirs
                return out
            return make_counted

        for owner, name, what in ((hetrl.envs, "make_vector_env", "envs"),
                                  (HostPlatform, "__init__", "platforms"),
                                  (experiment, "build", "builds")):
            patch.setattr(owner, name, counted(what, getattr(owner, name)))
        results = run_job(store, *JOB)
    return store / "job0", results, store


def test_a_job_makes_its_platform_and_envs_once(job, made):
    """The checks made before the run opens read the platform and envs the job trains
    with: build() goes on from them and makes neither again (the evaluations make envs of
    their own)."""
    assert made["builds"] == 1
    assert made["platforms"] == 1 and made["built"] == 1


def test_every_job_leaves_a_policy_file_and_its_run_has_it(job):
    folder, results, store = job
    assert (folder / checkpoint.POLICY).is_file()
    names = {f.path for f in MlflowClient(tracking_uri(store)).list_artifacts(results["run_id"])}
    assert {checkpoint.POLICY, "policy", "policy_best"} <= names


def test_load_builds_the_policy_alone_leaves_every_rng_and_acts_as_the_learner(job):
    folder, results, _ = job
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    before = rng_states()
    agent = hetrl.load(folder)
    after = rng_states()
    assert before["python"] == after["python"]
    assert np.array_equal(before["numpy"][1], after["numpy"][1])
    assert torch.equal(before["torch"], after["torch"])
    assert set(agent.networks) == {"q", "q_target"}
    assert next(agent.learner.parameters()).device.type == "cpu"
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    greedy = agent.networks["q"](torch.from_numpy(obs)).argmax(1).numpy()
    assert np.array_equal(agent.act(obs), greedy)
    assert agent.act(obs[0]) == greedy[0]  # one observation: one action
    assert np.array_equal(agent.greedy()(torch.from_numpy(obs)).numpy(), greedy)
    # the end summary's greedy evaluation is the agent's, on the same fresh seeds
    # (eval.final=4 episodes, those that end within the job's 400 env steps)
    n = int(results["eval/final_episodes"])
    assert 1 <= n <= 4
    assert agent.evaluate(n).mean() == pytest.approx(results["eval/final_return_mean"])


def test_a_checkpoint_file_and_the_mlflow_run_load_the_same_policy(job):
    folder, results, store = job
    obs = np.random.default_rng(1).normal(size=(32, 4)).astype(np.float32)
    expected = hetrl.load(folder / checkpoint.POLICY).act(obs)
    from_checkpoint = hetrl.load(folder / checkpoint.FILENAME)
    from_run = hetrl.load(f"runs:/{results['run_id']}", tracking_uri=tracking_uri(store))
    assert np.array_equal(from_checkpoint.act(obs), expected)
    assert np.array_equal(from_run.act(obs), expected)
    assert from_run.run_id == results["run_id"]
    best = hetrl.load(folder, weights="best")  # the kept best evaluation's weights
    kept = torch.load(folder / checkpoint.POLICY, weights_only=True)["best"]
    assert all(torch.equal(best.learner.state_dict()[k], v) for k, v in kept.items())
    with pytest.raises(ConfigError, match=r"weights='last' is invalid.*'final', 'best'"):
        hetrl.load(folder, weights="last")


@pytest.mark.parametrize("source, named", [
    ("no/such/folder", "no such file or folder"),
    ("runs:/0123456789abcdef0123456789abcdef", "no such run"),
])
def test_a_bad_source_is_named_with_the_valid_ones(job, source, named):
    with pytest.raises(ConfigError, match=named) as error:
        hetrl.load(source, tracking_uri=tracking_uri(job[2]))
    assert source in str(error.value)


def test_evaluate_prints_the_greedy_return_and_logs_a_video_to_the_run(job, capsys):
    folder, results, store = job
    evaluate_main([str(folder), "episodes=3", "video=true",
                   f"tracking_uri={tracking_uri(store)}"])
    out = capsys.readouterr().out
    assert "greedy return" in out and "95 % interval, 3 episodes" in out
    import imageio.v2 as imageio

    assert imageio.get_reader(folder / "episode_0.mp4").count_frames() > 5
    names = {f.path for f in MlflowClient(tracking_uri(store)).list_artifacts(
        results["run_id"], "videos")}
    assert names == {"videos/episode_0.mp4"}
    with pytest.raises(ConfigError, match=r"episodes='x' is invalid"):
        evaluate_main([str(folder), "episodes=x"])


@pytest.mark.slow
def test_the_mlflow_model_returns_actions_and_is_served(job, tmp_path):
    import mlflow.pyfunc

    folder, results, store = job
    mlflow.set_tracking_uri(tracking_uri(store))
    uri = f"runs:/{results['run_id']}/policy"
    model = mlflow.pyfunc.load_model(uri)
    obs = np.random.default_rng(2).normal(size=(8, 4)).astype(np.float32)
    expected = hetrl.load(folder).act(obs)
    assert np.array_equal(model.predict(obs), expected)
    assert model.metadata.metadata["actors_precision"] == "fp32"
    assert model.metadata.signature.inputs.to_dict()[0]["tensor-spec"]["shape"] == (-1, 4)
    # its requirements: hetrl's own, pinned as the job ran (torch without its +cpu label)
    requirements = Path(mlflow.pyfunc.get_model_dependencies(uri)).read_text().split()
    assert {f"mlflow=={mlflow.__version__}", f"numpy=={np.__version__}",
            f"torch=={torch.__version__.split('+')[0]}"} <= set(requirements)
    assert any(r.startswith("gymnasium") and "==" in r for r in requirements)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "serve.log"
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "models", "serve", "-m", uri, "--env-manager",
         "local", "--port", str(port), "--host", "127.0.0.1", "--workers", "1"],
        # the server execs `uvicorn` from PATH: this interpreter's, activated or not
        env={**os.environ, "MLFLOW_TRACKING_URI": tracking_uri(store),
             "PATH": os.pathsep.join((str(Path(sys.executable).parent), os.environ["PATH"]))},
        stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        answer = _ask(port, {"inputs": obs.tolist()}, server, log)
        assert answer["predictions"] == expected.tolist()
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


def _ask(port: int, body: dict, server: subprocess.Popen, log: Path, wait_s: float = 120) -> dict:
    """POST `body` to the served model's /invocations once the server answers."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/invocations",
                                     json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read())
        except OSError:
            assert server.poll() is None, f"mlflow models serve exited:\n{log.read_text()}"
            assert time.monotonic() < deadline, \
                f"mlflow models serve did not answer:\n{log.read_text()}"
            time.sleep(0.5)


@pytest.mark.parametrize("int8", [False, True], ids=["fp32", "int8"])
def test_export_writes_onnx_that_onnx_runtime_runs_as_pytorch_and_logs_it(job, capsys, int8):
    import onnx

    from hetrl.export import check, main as export_main

    folder, results, store = job
    export_main([str(folder), "--format", "onnx", "--observations", "1000",
                 "--tracking-uri", tracking_uri(store), *(["--int8"] if int8 else [])])
    name = "policy_int8.onnx" if int8 else "policy.onnx"
    assert f"wrote {folder / name}" in capsys.readouterr().out
    model = onnx.load(folder / name)
    ops = {node.op_type for node in model.graph.node}
    int8_weights = [i for i in model.graph.initializer if i.data_type == onnx.TensorProto.INT8
                    and len(i.dims) == 2]
    assert ({"DequantizeLinear", "QuantizeLinear"} <= ops) == int8 == bool(int8_weights)
    names = {f.path for f in MlflowClient(tracking_uri(store)).list_artifacts(
        results["run_id"], "onnx")}
    assert f"onnx/{name}" in names
    # a model that is not the policy fails the check
    last = next(i for i in model.graph.initializer if i.name.endswith("bias"))
    last.raw_data = np.full(tuple(last.dims), 50.0, np.float32).tobytes() if not int8 else (
        np.arange(np.prod(last.dims), dtype=np.float32).tobytes())
    with pytest.raises(AssertionError, match="differs|is off"):
        check(hetrl.load(folder), model.SerializeToString(), int8, n=500)


def test_the_end_summary_shows_the_greedy_evaluation_beside_the_training_mean(job):
    from hetrl.experiment import _end_summary
    from hetrl.tracking.base import NullTracker

    folder, results, _ = job
    summary = _end_summary("job", results, folder, NullTracker(None, None))
    training = summary.index("return_mean_100")
    greedy = summary.index(f"greedy eval/final_return_mean {results['eval/final_return_mean']:.4g}"
                           f" ± {results['eval/final_return_ci95']:.2g}"
                           f" ({int(results['eval/final_episodes'])} episodes)")
    assert training < greedy


@pytest.mark.parametrize("overrides, announced", [
    (("precision=bf16",), True), (("precision=bf16", "reference=find"), False),
    (("precision=fp32",), False)])
def test_the_start_line_announces_the_reference_run_it_will_train(overrides, announced):
    from hetrl.experiment import _start_line, _twin_note
    from hetrl.options import compose_job
    from hetrl.tracking.base import NullTracker
    from hetrl.tracking.reward_error import twin_to_train

    cfg, choices = compose_job("steps=1234", *overrides)
    tracker = NullTracker(None, None)
    twin = twin_to_train(cfg, choices, tracker)
    line = _start_line(cfg, "job", Path("out"), tracker, None, _twin_note(cfg, twin))
    note = "then its reference run (precision=fp32, for reward_error_pct): another 1,234 env steps"
    assert (note in line and "reference=find skips it" in line) == announced
