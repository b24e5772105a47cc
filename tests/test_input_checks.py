"""Every error before the store: what can be checked without training is checked before a
store or a run exists, in one line naming the key, the value and the valid choices; the
fast part before torch, MLflow or an env is imported."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import compose_job, tracking_uri

from hetrl.build import preflight
from hetrl.checks import PROBE_S, check_inputs
from hetrl.config.errors import ConfigError


def _closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


MULTI_AGENT = ("env=simple_spread", "algo=maddpg", "replay=joint")


@pytest.mark.parametrize("overrides, words", [
    (("+stpes=600",), ["stpes", "did you mean steps"]),
    ((*MULTI_AGENT, "replay.sampler=foo"), ["replay.sampler=foo", "replay/sampler=<name>",
                                            "'locality'"]),
    (("replay=prioritized", "replay.fanout=1000000"), ["replay.fanout=1000000", "[2, 1024]"]),
    (("tracking.experiment=" + "x" * 2000,), ["tracking.experiment=", "2000 characters", "500"]),
    (("algo._target_=hetrl.algos.nope.DQN",), ["algo._target_=hetrl.algos.nope.DQN",
                                               "no module 'hetrl.algos.nope'"]),
    (("platform=versal", "platform.devices.ps.rates={float32:0}"),
     ["platform.devices.ps.rates={'float32': 0.0} is invalid"]),
    (("tracking.uri=http://127.0.0.1:{port}",), ["tracking.uri=http://127.0.0.1:", "refused",
                                                 "python -m hetrl.tracking.server up"]),
    (("scheduler=actorq", "actors=ray", "actors.address=ray://127.0.0.1:{port}"),
     ["actors.address=ray://127.0.0.1:", "ray start --head"]),
], ids=["key", "sampler-key-form", "fanout", "experiment-name", "target", "enum", "tracking-uri",
        "ray-address"])
def test_a_bad_input_is_named_in_one_line_before_anything_is_built(overrides, words):
    port = _closed_port()
    cfg, choices = compose_job(*(o.replace("{port}", str(port)) for o in overrides))
    start = time.monotonic()
    with pytest.raises(ConfigError) as error:
        check_inputs(cfg, choices)
    message = str(error.value)
    assert "\n" not in message and time.monotonic() - start < PROBE_S + 0.5
    for word in words:
        assert word in message, message


ENV_ERRORS = [
    (("env.id=NoSuchEnv-v9",), ["env.id=NoSuchEnv-v9", "doesn't exist", "pprint_registry"]),
    (("env.id=CartPol-v1",), ["env.id=CartPol-v1", "did you mean env.id=CartPole-v1"]),
    (("env=dmc_cheetah_run", "env.id=shimmy:dm_control/cheetah-rn-v0"),
     ["did you mean env.id=shimmy:dm_control/cheetah-run-v0"]),
    (("env.id=nosuchmodule:Bar-v0",), ["env.id=nosuchmodule:Bar-v0", "No module named"]),
    (("+env.kwargs.foo=1",), ["env.kwargs.foo=1", "CartPole-v1 takes no argument 'foo'",
                              "sutton_barto_reward"]),
    ((*MULTI_AGENT, "env.id=simple_sprad_v3"), ["env.id=simple_sprad_v3",
                                                "did you mean env.id=simple_spread_v3"]),
    ((*MULTI_AGENT, "+env.kwargs.foo=1"), ["env.kwargs.foo=1", "simple_spread_v3 takes no "
                                           "argument 'foo'", "local_ratio"]),
]
ENV_IDS = ["id", "close-id", "module-id", "no-module", "kwarg", "mpe-id", "mpe-kwarg"]


@pytest.mark.parametrize("overrides, words", ENV_ERRORS, ids=ENV_IDS)
def test_an_unknown_env_or_env_argument_is_named_before_anything_is_built(overrides, words):
    cfg, choices = compose_job(*overrides)
    with pytest.raises(ConfigError) as error:
        check_inputs(cfg, choices)
    assert "\n" not in str(error.value)
    for word in words:
        assert word in str(error.value), str(error.value)


@pytest.mark.parametrize("overrides, words", ENV_ERRORS[::4], ids=ENV_IDS[::4])
def test_an_unknown_env_or_env_argument_is_the_configs_error_when_made(overrides, words):
    """A resumed job skips check_inputs: making the env names the same errors."""
    cfg, _ = compose_job(*overrides)
    with pytest.raises(ConfigError) as error:
        preflight(cfg)
    for word in words:
        assert word in str(error.value), str(error.value)


def test_an_unknown_env_id_fails_fast_without_torch_or_a_store(tmp_path: Path):
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "hetrl", "env.id=NoSuchEnv-v9",
         f"tracking.uri={tracking_uri(tmp_path)}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr[-3000:]
    (line,) = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert "env.id=NoSuchEnv-v9 is invalid" in line and "Traceback" not in out.stderr
    assert not _imported(out.stderr) & {"torch", "mlflow"}
    assert not (tmp_path / "mlflow.db").exists()


def _imported(importtime: str) -> set[str]:
    """The modules `python -X importtime` reports as imported."""
    return {row.split("|")[-1].strip() for row in importtime.splitlines()
            if row.startswith("import time:")}


PLATFORM_WITHOUT_DEVICES = """defaults:
  - /schema/platform/modeled@_here_
  - _self_
_target_: hetrl.platform.model.ModeledPlatform
name: mine
host: cpu
"""


def test_a_platform_file_without_devices_fails_fast_without_torch_or_a_store(tmp_path: Path):
    """The fast part runs before torch and MLflow are imported, and makes no store."""
    (tmp_path / "conf" / "platform").mkdir(parents=True)
    (tmp_path / "conf" / "platform" / "mine.yaml").write_text(PLATFORM_WITHOUT_DEVICES)
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "hetrl", "platform=mine",
         f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
         f"tracking.uri={tracking_uri(tmp_path)}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr[-3000:]
    (line,) = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert "platform.baselines is missing" in line and "platform=mine" in line
    assert "platform.devices" in line and "Traceback" not in out.stderr
    assert not _imported(out.stderr) & {"torch", "mlflow", "gymnasium"}
    assert not (tmp_path / "mlflow.db").exists()
