"""What a finished job leaves for its users: `policy.pt` (what `hetrl.load` reads) in its
folder and its run, the policy as MLflow models (the final one and the kept best one), and
the greedy evaluation of the final policy that the end summary shows beside the training mean.
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Any, Callable, Mapping

import gymnasium as gym
import numpy as np
from omegaconf import DictConfig, OmegaConf

from hetrl import checkpoint
from hetrl.algos.base import Learner
from hetrl.build import Components
from hetrl.evaluation import FINAL_SEED_OFFSET, episode_returns
from hetrl.seeding import rng_states, set_rng_states
from hetrl.tracking.base import Tracker

def leave_policy(cfg: DictConfig, choices: Mapping[str, str], out_dir: Path, tracker: Tracker,
                 c: Components, step: int,
                 best: tuple[int, float, dict[str, Any]] | None) -> dict[str, float]:
    """The final greedy evaluation (`eval.final` episodes; none for a game's self-play, which
    measures itself in games), logged; then `policy.pt` and the MLflow models. Returns the
    evaluation's metrics."""
    metrics: dict[str, float] = {}
    if cfg.eval.final > 0 and getattr(c.scheduler, "episode_returns", True):
        metrics = final_evaluation(c.learner, partial(c.make_envs, n_envs=1), cfg.eval.final,
                                   cfg.seed, max_steps=cfg.steps)
        tracker.log_metrics(metrics, step=step)
    policy = save_policy(out_dir, cfg, choices, tracker, c.learner, step, best)
    log_models(tracker, policy, c.envs, cfg, choices, kept=best is not None)
    return metrics


def save_policy(out_dir: Path, cfg: DictConfig, choices: Mapping[str, str],
                tracker: Tracker, learner: Learner, step: int,
                best: tuple[int, float, dict[str, Any]] | None) -> Path:
    """Write `policy.pt` (config, choices, run, final weights and the kept best ones, if the
    job evaluated) into `out_dir` and log it to the run."""
    path = checkpoint.save_policy(out_dir / checkpoint.POLICY, {
        "config": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
        "choices": dict(choices), "run_id": tracker.run_id,
        "tracking_uri": cfg.tracking.get("uri"), "step": step,
        "modules": learner.state_dict(),
        "best": best[2] if best is not None else None,
        "best_step": best[0] if best is not None else None,
    })
    tracker.log_artifact(path)
    return path


def log_models(tracker: Tracker, policy: Path, envs: gym.vector.VectorEnv,
               cfg: DictConfig, choices: Mapping[str, str], kept: bool) -> list[str]:
    """The final policy (and the kept best one, if `kept`) as MLflow models in the run's
    artifacts, acting in the actors' precision; only into an MLflow run."""
    if not tracker.run_id or getattr(tracker, "client", None) is None:
        return []
    from hetrl.tracking.model import log_policy_model

    metadata = {"algo": choices["algo"], "env": choices["env"], "seed": str(cfg.seed),
                "actors_precision": str(cfg.actors.get("precision", "fp32"))}
    spaces = envs.single_observation_space, envs.single_action_space
    return [log_policy_model(tracker, policy, *spaces, metadata, weights, "actors")
            for weights in (("final", "best") if kept else ("final",))]


def final_evaluation(learner: Learner, make_env: Callable[[], gym.vector.VectorEnv],
                     episodes: int, seed: int, max_steps: int) -> dict[str, float]:
    """`episodes` greedy episodes of the final policy, within `max_steps` env steps in all
    (as many as the job trained: an untrained policy that never ends an episode costs no more
    than its training did): `eval/final_return_mean`, its 95 % interval's half width
    (`eval/final_return_ci95`, normal approximation) and the episodes that ended."""
    env = make_env()
    saved = rng_states()
    try:
        returns = episode_returns(learner, env, episodes, seed + FINAL_SEED_OFFSET,
                                  max_steps=max_steps)
    finally:
        set_rng_states(saved)
        env.close()
    if len(returns) == 0:
        return {"eval/final_episodes": 0.0}
    return {"eval/final_return_mean": float(returns.mean()),
            "eval/final_return_ci95": ci95(returns),
            "eval/final_episodes": float(len(returns))}


def ci95(values: np.ndarray) -> float:
    """Half width of the mean's 95 % interval (normal approximation; 0 for one value)."""
    if len(values) < 2:
        return 0.0
    return float(1.96 * np.std(values, ddof=1) / math.sqrt(len(values)))
