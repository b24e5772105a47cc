"""`hetrl.load(source)`: the agent of a run, from its policy file, built for inference only.

Only the learner's networks and one env are made (no replay, actors, scheduler or platform,
no step planned), every global RNG is left as it was, the networks are on the CPU unless
`device` says otherwise; a Go run gives a `GoAgent`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from hetrl.agent import Agent, rngs_kept
from hetrl.agent_source import policy_state
from hetrl.build import env_maker, spaces
from hetrl.config.errors import require
from hetrl.go_agent import GoAgent


def load(source: str | Path, tracking_uri: str | None = None, device: str = "cpu",
         precision: str = "fp32", weights: str = "final") -> Agent:
    """The agent of a run: `source` is a job folder, a `policy.pt` or `checkpoint.pt` file,
    or an MLflow run (`runs:/<id>` or the id, in the store at `tracking_uri`; by default
    MLFLOW_TRACKING_URI, else sqlite:///runs/mlflow.db). `precision`: "fp32" or "actors" (the
    actors' PTQ copy); `weights`: "final", or "best" (the kept best evaluation's, where the
    job evaluated). A Go run gives a `GoAgent`."""
    state = policy_state(source, tracking_uri)
    return from_state(state, device, precision, weights)


WEIGHTS = {"final": "modules", "best": "best"}
"""`weights` -> the policy file's key that holds them."""


def from_state(state: dict[str, Any], device: str = "cpu", precision: str = "fp32",
               weights: str = "final") -> Agent:
    """The agent of a policy file's contents (`load`'s options)."""
    valid = [name for name, key in WEIGHTS.items() if state.get(key) is not None]
    require(weights in valid, "weights", weights, str(valid))
    config = OmegaConf.create(state["config"])
    make_env = one_env(config)
    env = make_env()
    env.close()
    with rngs_kept():  # the networks' initial weights draw from torch's RNG
        learner = instantiate(config.algo, **spaces(env), device=torch.device(device))
    learner.load_state_dict(state[WEIGHTS[weights]])
    learner.eval()
    kind = GoAgent if getattr(env, "game", None) is not None else Agent
    return kind(config, learner, make_env, env, precision=precision,
                run_id=state.get("run_id"), tracking_uri=state.get("tracking_uri"))


def one_env(config: DictConfig, **kwargs: Any) -> Callable[[], gym.vector.VectorEnv]:
    """Makes one env of the job's (in this process: a subprocess env made synchronous),
    `kwargs` added to the env's own (`render_mode="rgb_array"`)."""
    env = {"n_envs": 1} if "n_envs" in config.env else {}
    if config.env.get("vectorization") == "async":
        env["vectorization"] = "sync"
    if kwargs:
        env["kwargs"] = {**(config.env.get("kwargs") or {}), **kwargs}
    return env_maker(OmegaConf.merge(config, {"env": env}))


