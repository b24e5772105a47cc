"""The worked examples of docs/extending.md (examples/extending/): each new option composes
from the examples' conf/ through `hydra.searchpath`, passes validation, and trains a few
steps; the guide's command lines compose, and one runs as `python -m hetrl`."""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import hetrl_cli, metric_history, mlflow_runs

from hetrl import experiment
from hetrl.build import build
from hetrl.config.errors import ConfigError
from hetrl.options import compose_job
from hetrl.platform.measure import random_batch
from hetrl.scheduler.state import LoopState
from hetrl.scheduler.updates import Updates
from hetrl.validation import validate

ROOT = Path(__file__).resolve().parent.parent
EXTENDING = ROOT / "examples" / "extending"
sys.path.insert(0, str(EXTENDING))  # the examples' modules, as PYTHONPATH=examples/extending

from hetrl_examples import schemas
from hetrl_examples.recent_sampler import RecentSampler

schemas.register()  # what hydra_plugins/hetrl_examples.py does when `python -m hetrl` starts
SEARCHPATH = f"hydra.searchpath=[file://{EXTENDING / 'conf'}]"
TINY = ("tracking=none", "device=cpu", "log_every=100", "algo.hidden=[32]")


def job(*overrides: str):
    """The job config of the examples' options and these overrides, validated."""
    cfg, choices = compose_job(SEARCHPATH, *TINY, *overrides)
    validate(cfg, choices)
    return cfg, choices


def train(tmp_path: Path, *overrides: str) -> dict:
    return experiment.run(*job(*overrides), tmp_path)


OFF_POLICY = ("steps=600", "algo.learning_starts=200", "algo.batch_size=32")


def test_an_algorithm_expected_sarsa(tmp_path: Path):
    results = train(tmp_path, "algo=expected_sarsa", *OFF_POLICY)
    assert results["updates"] == (600 - 200) // 4  # DQN's schedule: one update per train_freq
    assert np.isfinite(results["learner/loss"]) and "return_mean_100" in results


def test_an_algorithms_declared_rule_is_counted_once_and_syncs_its_target_on_time():
    """The update step counts the updates (the rule never does), so the target network is
    copied on every `target_update_interval`-th update, not twice as often."""
    cfg, _ = job("algo=expected_sarsa", "algo.target_update_interval=3", "algo.batch_size=8")
    c = build(cfg, plan=False)
    c.envs.close()
    learner = c.learner
    batches = [random_batch(learner, **c.spaces, n=8, device=learner.device, seed=seed)
               for seed in range(7)]
    synced = []
    for batch in batches:
        learner.learn(batch)
        synced.append(torch.equal(learner.q[0].weight, learner.q_target[0].weight))
    assert learner.updates == 7
    assert synced == [False, False, True, False, False, True, False]


def test_an_algorithm_is_checked_by_its_class_flags_and_schema():
    with pytest.raises(ConfigError, match=r"algo=expected_sarsa is a single-agent algo with "
                                          r"discrete actions and cannot act in env=pendulum"):
        job("algo=expected_sarsa", "env=pendulum")
    with pytest.raises(ConfigError, match="describes no task graph"):  # no task_graph method
        job("algo=expected_sarsa", "platform=cpu_npu")
    with pytest.raises(ConfigError, match=r"algo.target_epsilon=2.0 is invalid"):
        job("algo=expected_sarsa", "algo.target_epsilon=2")


def test_an_env_lunarlander(tmp_path: Path):
    cfg, _ = job("env=lunarlander")
    assert cfg.env.id == "LunarLander-v3" and cfg.algo._target_.endswith("DQN")
    results = train(tmp_path, "env=lunarlander", *OFF_POLICY)
    assert results["episodes"] > 0 and "return_mean_100" in results and results["updates"] > 0


def test_a_platform_cpu_npu_puts_gemms_on_the_npu(tmp_path: Path):
    # the tuned DQN's widths: a GEMM of 64 x 256 x 256 is worth the NPU's launch cost
    results = train(tmp_path, "platform=cpu_npu", "algo=dqn", *OFF_POLICY, "algo.batch_size=64",
                    "algo.hidden=[256,256]")
    assert results["platform/nodes_npu"] > 0 and results["platform/nodes_cpu"] > 0
    assert results["updates"] > 0


def test_a_sampler_draws_from_the_newest_transitions(tmp_path: Path, monkeypatch):
    draws = []  # (slots drawn, newest slot, filled slots) of every batch
    sample = RecentSampler.sample

    def spy(self, n, size):
        idx, weights = sample(self, n, size)
        draws.append((idx, self.newest, size))
        return idx, weights

    monkeypatch.setattr(RecentSampler, "sample", spy)
    window = 50
    results = train(tmp_path, "algo=maddpg", "env=simple_spread", "replay=joint",
                    "replay/sampler=recent", f"replay.sampler.window={window}", "steps=300",
                    "algo.learning_starts=100", "algo.batch_size=32", "algo.train_freq=50")
    assert results["updates"] > 0 and draws
    for idx, newest, size in draws:
        behind = (newest - idx) % size
        assert behind.max() < window and size > window
    # the reference run of a job with a sampler of its own is the uniform sampler's
    assert "reward_error_pct" in results


def test_a_scheduler_updates_only_at_episode_ends(tmp_path: Path, monkeypatch):
    ends, updated = set(), set()  # env steps at which episodes ended, at which updates ran
    record, step = LoopState.record_episodes, Updates.step
    monkeypatch.setattr(LoopState, "record_episodes",
                        lambda self, returns: (ends.add(self.step), record(self, returns))[1])
    monkeypatch.setattr(Updates, "step", lambda self: (updated.add(self.state.step), step(self))[1])
    results = train(tmp_path, "scheduler=episodic", "algo=dqn", *OFF_POLICY)
    assert results["updates"] > 0 and updated and updated <= ends


def test_a_scheduler_is_checked_by_the_needs_it_declares():
    """Validation words its refusals from the loop's `LoopNeeds`, with no case of its own."""
    with pytest.raises(ConfigError, match=r"actors=process does not fit scheduler=episodic, "
                                          r"which acts in the learner's process"):
        job("scheduler=episodic", "algo=dqn", "actors=process")
    with pytest.raises(ConfigError, match=r"algo=ppo is an on-policy algorithm and cannot "
                                          r"train with scheduler=episodic"):
        job("scheduler=episodic", "algo=ppo")


GUIDE = ROOT / "docs" / "extending.md"


def guide_commands() -> list[list[str]]:
    """The overrides of every command line of the guide (`python -m hetrl ...`, indented)."""
    lines = re.findall(r"^    PYTHONPATH=examples/extending python -m hetrl (.+)$",
                       GUIDE.read_text(), flags=re.MULTILINE)
    return [shlex.split(line) for line in lines]


def test_the_guide_names_every_example_file_and_quotes_them_as_they_are():
    text = GUIDE.read_text()
    files = [p for p in EXTENDING.rglob("*") if p.suffix in (".py", ".yaml")
             and "__pycache__" not in p.parts and p.name != "__init__.py"]
    assert files and all(str(p.relative_to(EXTENDING)) in text for p in files)
    blocks = re.findall(r"^```(?:python|yaml)\n# (examples/extending/\S+)\n(.*?)^```", text,
                        flags=re.MULTILINE | re.DOTALL)
    assert len(blocks) >= 10
    for path, code in blocks:
        assert code in (ROOT / path).read_text(), f"the guide's excerpt of {path} is not in it"


@pytest.mark.parametrize("overrides", guide_commands(), ids=" ".join)
def test_each_command_line_of_the_guide_composes_and_validates(overrides):
    searchpath = "hydra.searchpath=[file://examples/extending/conf]"
    assert searchpath in overrides and len(guide_commands()) == 10
    job(*(o for o in overrides if o != searchpath))


def test_python_m_hetrl_runs_an_example_option(tmp_path: Path, monkeypatch):
    """The command as the guide shows it (PYTHONPATH=examples/extending), from another dir:
    the examples' schemas come through hydra_plugins, their classes through PYTHONPATH."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(EXTENDING), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = hetrl_cli(tmp_path, SEARCHPATH, "algo=expected_sarsa", "steps=400",
                     "algo.learning_starts=100", "algo.hidden=[32]", "log_every=100")
    assert done.returncode == 0, done.stderr[-2000:]
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "FINISHED" and run.data.tags["algo"] == "expected_sarsa"
    assert metric_history(tmp_path, run.info.run_id, "updates")[-1][1] == (400 - 100) // 4
