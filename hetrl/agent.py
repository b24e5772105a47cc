"""A trained agent out of a run, built for inference only (`hetrl.load`: `hetrl.loading`).

    agent = hetrl.load("runs/2026-12-02/12-00-00")        # a job folder
    agent = hetrl.load("runs:/<run id>", tracking_uri="sqlite:///runs/mlflow.db")
    agent.act(obs)                  # the greedy action(s) for one observation or a batch
    agent.evaluate(episodes=10)     # returns of greedy episodes on seeds no evaluation played
    agent.move(position)            # Go: the search's move, as the job's evaluation chooses it

Only the learner's networks and one env are made: no replay, actors, scheduler or platform,
no step planned; every global RNG is left as it was; the networks are on the CPU unless
`device` says otherwise.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Callable, Iterator

import gymnasium as gym
import numpy as np
import torch
from omegaconf import DictConfig
from torch import nn

from hetrl.algos.base import Learner
from hetrl.config.errors import require
from hetrl.evaluation import FINAL_SEED_OFFSET, episode_returns
from hetrl.quant import QuantSpec, quantize_policy
from hetrl.seeding import rng_states, set_rng_states

PRECISIONS = ("fp32", "actors")
"""What a loaded agent acts in: float32, or the job's actors' precision (`actors.precision`:
QuaRL's PTQ copy, as the job's actors acted)."""


@contextmanager
def rngs_kept() -> Iterator[None]:
    """Every global RNG (python, numpy, torch) as it was before the block."""
    saved = rng_states()
    try:
        yield
    finally:
        set_rng_states(saved)


class GreedyPolicy(nn.Module):
    """The policy network as one module from observations to the actions `act` takes
    deterministically: the argmax of a discrete head (Q-values, logits, a Go network's move
    logits), a continuous one clipped to the action bounds. What the exporters trace."""

    def __init__(self, policy: nn.Module, act_space: gym.Space) -> None:
        super().__init__()
        self.policy = policy
        self.discrete = isinstance(act_space, gym.spaces.Discrete)
        bounds = (None, None) if self.discrete else (act_space.low, act_space.high)
        for name, bound in zip(("low", "high"), bounds):
            self.register_buffer(name, None if bound is None
                                 else torch.as_tensor(bound, dtype=torch.float32))

    def head(self, obs: torch.Tensor) -> torch.Tensor:
        """The network's output the action is chosen from (Q-values, logits, the action)."""
        out = self.policy(obs)
        return (out[0] if isinstance(out, tuple) else out).float()  # Go: (logits, value)

    def choose(self, head: torch.Tensor) -> torch.Tensor:
        if self.discrete:
            return head.argmax(dim=1)
        return torch.maximum(torch.minimum(head, self.high), self.low)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.choose(self.head(obs))


class Agent:
    """A run's policy with its env: act, evaluate, and the networks as the learner has them."""

    def __init__(self, config: DictConfig, learner: Learner,
                 make_env: Callable[[], gym.vector.VectorEnv], env: gym.vector.VectorEnv,
                 precision: str = "fp32", run_id: str | None = None,
                 tracking_uri: str | None = None) -> None:
        """`env` is one env `make_env` made (closed: its spaces are read)."""
        require(precision in PRECISIONS, "precision", precision, str(list(PRECISIONS)))
        self.config, self.learner, self.make_env = config, learner, make_env
        self.run_id, self.tracking_uri = run_id, tracking_uri
        self.precision = self.actor_spec().name if precision == "actors" else "fp32"
        self._copy = (quantize_policy(learner.policy(), self.actor_spec())
                      if precision == "actors" and self.actor_spec().quantized else None)
        self.obs_space, self.act_space = env.single_observation_space, env.single_action_space

    @property
    def networks(self) -> dict[str, nn.Module]:
        """The learner's networks by attribute name (`q`, `actor`, `critic`, `net`, ...)."""
        return dict(self.learner.named_children())

    def actor_spec(self) -> QuantSpec:
        """The precision the job's actors acted in."""
        actors = self.config.actors
        return QuantSpec(actors.get("precision", "fp32"), actors.get("int8_mode", "kernel"),
                         actors.get("per_channel", True))

    def acting(self):
        """The block in which the learner acts in the agent's precision."""
        return self.learner.acting_with(self._copy) if self._copy is not None else nullcontext()

    def act(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """Actions for a batch of observations (or the action for one): greedy, or with
        `deterministic=False` as the learner explores at the end of its training."""
        obs = np.asarray(obs, dtype=self.obs_space.dtype)
        single = obs.shape == self.obs_space.shape
        batch = obs[None] if single else obs
        step = None if deterministic else 1 << 62
        with torch.inference_mode(), self.acting():
            actions = self.learner.act(batch, step)
        return actions[0] if single else actions

    def greedy(self) -> GreedyPolicy:
        """The deterministic policy (in the agent's precision) as one module."""
        return GreedyPolicy(self._copy or self.learner.policy(), self.act_space).eval()

    def log_to_run(self, files: list[Path], folder: str) -> str | None:
        """Log `files` into the run's artifacts (`folder`); where, or None without a run."""
        if not self.run_id or not self.tracking_uri:
            return None
        from mlflow.tracking import MlflowClient

        client = MlflowClient(self.tracking_uri)
        for file in files:
            client.log_artifact(self.run_id, str(file), folder)
        return f"run {self.run_id} ({self.tracking_uri}), artifacts {folder}/"

    def observations(self, n: int, seed: int | None = None) -> np.ndarray:
        """`n` observations the policy meets: its own episodes on the env (acting as it
        explores at the end of training, for variety), from `reset(seed=seed)`."""
        seed = self.config.seed + FINAL_SEED_OFFSET if seed is None else seed
        env, seen = self.make_env(), []
        try:
            with rngs_kept():
                np.random.seed(seed), torch.manual_seed(seed)
                obs, _ = env.reset(seed=seed)
                while len(seen) < n:
                    seen.append(obs[0])
                    obs = env.step(self.act(obs, deterministic=False))[0]
        finally:
            env.close()
        return np.stack(seen)

    def evaluate(self, episodes: int = 10, seed: int | None = None) -> np.ndarray:
        """Returns of `episodes` greedy episodes, episode i from `reset(seed=seed + i)` (by
        default seed = the job's seed + FINAL_SEED_OFFSET); global RNGs left as they were."""
        require(episodes >= 1, "episodes", episodes, "integers >= 1")
        seed = self.config.seed + FINAL_SEED_OFFSET if seed is None else seed
        env = self.make_env()
        try:
            with rngs_kept():
                return episode_returns(self.learner, env, episodes, seed, policy=self._copy)
        finally:
            env.close()
