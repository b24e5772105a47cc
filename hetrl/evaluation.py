"""Deterministic evaluation of a learner's policy, and QuaRL's PTQ reward error.

`ptq_reward_error_pct` compares the final policy run in its quantized precision with the
same weights in fp32, on the same episodes: episode i of both starts from
`reset(seed=seed + i)` and both act deterministically (greedy for DQN, the mean or most
likely action for the policy-gradient learners), so the only difference is the precision.
"""

from __future__ import annotations

import copy
from contextlib import nullcontext
from typing import Callable, Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from hetrl.algos.base import Learner
from hetrl.quant import QuantSpec, quantize_policy
from hetrl.seeding import rng_states, set_rng_states

EVAL_SEED_OFFSET = 1_000_000
"""Evaluation episodes are seeded apart from the training envs (seed, seed + 1, ...)."""


def episode_returns(learner: Learner, env: gym.vector.VectorEnv, episodes: int, seed: int,
                    policy: nn.Module | None = None,
                    max_steps: int | None = None) -> np.ndarray:
    """Returns of `episodes` deterministic episodes on the first env of `env`, episode i
    starting from `reset(seed=seed + i)`; `policy` stands in for the learner's own. An
    episode's return is the env's own episode statistic where it records one (a multi-agent
    env's team return), else the sum of its rewards. With `max_steps`, no more env steps
    than that are played in all: the returns are those of the episodes that ended."""
    returns = np.zeros(episodes)
    budget = max_steps if max_steps is not None else float("inf")
    with learner.acting_with(policy) if policy is not None else nullcontext():
        for i in range(episodes):
            obs, _ = env.reset(seed=seed + i)
            done = False
            while not done:
                if budget <= 0:
                    return returns[:i]
                budget -= 1
                obs, reward, terminated, truncated, info = env.step(learner.act(obs, None))
                returns[i] += float(np.sum(reward[0]))
                done = bool(np.any(terminated[0]) or np.any(truncated[0]))
            if done and "episode" in info and info.get("_episode", [True])[0]:
                returns[i] = float(np.asarray(info["episode"]["r"])[0])
    return returns


BEST_SEED_OFFSET = 1_000
"""The kept policy is scored on episodes seed + EVAL_SEED_OFFSET + BEST_SEED_OFFSET + i, which
no evaluation during training played (eval.episodes <= BEST_SEED_OFFSET)."""
FINAL_SEED_OFFSET = EVAL_SEED_OFFSET + 2 * BEST_SEED_OFFSET
"""The final greedy evaluation of a job (its end summary) and `hetrl.load`'s agents play
episodes seed + FINAL_SEED_OFFSET + i: seeds that neither the training envs, the evaluations
during training nor the kept policy's scoring played."""


class Evaluator:
    """Deterministic evaluation during training (`eval.every`, `eval.episodes`): the
    learner's policy, acting without exploration, on an env of its own whose episode i starts
    from `reset(seed=seed + i)` every time, so that two evaluations differ only by the policy.
    Every global RNG is left as it was, so evaluating does not change what is learned."""

    def __init__(self, learner: Learner, make_env: Callable[[], gym.vector.VectorEnv],
                 episodes: int, seed: int) -> None:
        self.learner, self.episodes, self.seed = learner, episodes, seed + EVAL_SEED_OFFSET
        self.env = make_env()

    def __call__(self) -> dict[str, float]:
        returns = self._returns(self.seed)
        return {"eval/return_mean": float(returns.mean()), "eval/return_std": float(returns.std()),
                "eval/return_min": float(returns.min())}

    def best(self, step: int, weights: dict[str, torch.Tensor]) -> dict[str, float]:
        """The policy a user keeps, the learner as it was at its best evaluation (`weights`,
        at env step `step`; SB3's best model), scored on episodes that no evaluation played,
        so that having picked it for its return does not inflate that return. Where a learner
        does not stay converged (DQN on CartPole) this is the return its training reached."""
        now = copy.deepcopy(self.learner.state_dict())
        self.learner.load_state_dict(weights)
        try:
            returns = self._returns(self.seed + BEST_SEED_OFFSET)
        finally:
            self.learner.load_state_dict(now)
        return {"eval/best_return_mean": float(returns.mean()), "eval/best_step": float(step)}

    def _returns(self, seed: int) -> np.ndarray:
        saved = rng_states()
        try:
            return episode_returns(self.learner, self.env, self.episodes, seed)
        finally:
            set_rng_states(saved)

    def close(self) -> None:
        self.env.close()


def ptq_returns(learner: Learner, specs: Sequence[QuantSpec],
                make_env: Callable[[], gym.vector.VectorEnv], episodes: int,
                seed: int) -> dict[str, float]:
    """Mean deterministic return of the learner's policy in fp32 (key "fp32") and in each
    spec's precision (key `spec.name`), all on the same `episodes` episodes."""
    env = make_env()
    seed += EVAL_SEED_OFFSET
    try:
        means = {"fp32": float(episode_returns(learner, env, episodes, seed).mean())}
        for spec in specs:
            copy = quantize_policy(learner.policy(), spec)
            means[spec.name] = float(episode_returns(learner, env, episodes, seed, copy).mean())
    finally:
        env.close()
    return means


def reward_error_pct(value: float, reference: float) -> float:
    """AP-DRL's reward error: |R - R_ref| / |R_ref| x 100."""
    return abs(value - reference) / max(abs(reference), 1e-12) * 100.0


def ptq_metrics(fp32: float, quantized: float) -> dict[str, float]:
    """`ptq_reward_error_pct` is |R_q - R_fp32| / |R_fp32| x 100 (DESIGN.md); the signed
    `ptq_reward_error_signed_pct` is (R_fp32 - R_q) / |R_fp32| x 100, positive when
    quantization loses reward (the extract's Table 1 convention)."""
    signed = (fp32 - quantized) / max(abs(fp32), 1e-12) * 100.0
    return {"ptq_reward_error_pct": reward_error_pct(quantized, fp32),
            "ptq_reward_error_signed_pct": signed,
            "ptq_return_fp32": fp32, "ptq_return_quantized": quantized}


def ptq_reward_error(learner: Learner, spec: QuantSpec,
                     make_env: Callable[[], gym.vector.VectorEnv], episodes: int,
                     seed: int) -> dict[str, float]:
    """The final policy in `spec`'s precision vs in fp32, on the same episodes (`ptq_metrics`)."""
    means = ptq_returns(learner, [spec], make_env, episodes, seed)
    return ptq_metrics(means["fp32"], means[spec.name])
