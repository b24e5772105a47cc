"""Acting in vector envs, wherever it runs (a loop, an actor worker).

`env_step` is one vector-env step of every replay-based loop: act (uniformly at random
before `learning_starts`), step the envs, end the finished episodes, and hand back the
transitions as a replay stores them. The step is read under gymnasium's same-step autoreset
(hetrl.envs.gym): an env whose episode ended returns the next episode's first observation
already, and the true last one in `info["final_obs"]`."""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from hetrl.algos.base import OffPolicyLearner
from hetrl.timing import PhaseTimer


def final_obs(info: dict, ended: np.ndarray) -> np.ndarray:
    """The true last observations of the envs where `ended` is set."""
    return np.stack(info["final_obs"][ended])


def stored_next_obs(next_obs: np.ndarray, done: np.ndarray, info: dict) -> np.ndarray:
    """The next observations a replay stores: the true last one where an episode ended."""
    if not done.any():
        return next_obs
    stored = next_obs.copy()
    stored[done] = final_obs(info, done)
    return stored


def episode_returns(info: dict) -> np.ndarray:
    """The returns of the episodes that ended at this step."""
    return info["episode"]["r"][info["_episode"]]


@dataclass
class EnvStep:
    """The transitions of one vector-env step (`stored_next_obs` holds the true last
    observation where an episode ended; `next_obs` is what the envs go on from) and the
    returns of the episodes that ended in it."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    stored_next_obs: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    next_obs: np.ndarray
    returns: np.ndarray

    @property
    def transitions(self) -> tuple[np.ndarray, ...]:
        """(obs, actions, rewards, next_obs, terminated, truncated), as `Replay.add` takes them."""
        return (self.obs, self.actions, self.rewards, self.stored_next_obs, self.terminated,
                self.truncated)


def env_step(envs: gym.vector.VectorEnv, learner: OffPolicyLearner, obs: np.ndarray, step: int,
             timer: PhaseTimer) -> EnvStep:
    """Act from `obs` at env step `step` (timed as "act"), step the envs ("env"), and end the
    learner's finished episodes (its exploration noise resets)."""
    with timer("act"):
        if step < learner.learning_starts:
            actions = envs.action_space.sample()
        else:
            actions = learner.act(obs, step)
    with timer("env"):
        next_obs, rewards, terminated, truncated, info = envs.step(actions)
    done = terminated | truncated
    returns = np.zeros(0)
    if done.any():
        learner.end_episodes(done)
        returns = episode_returns(info)
    return EnvStep(obs, actions, rewards, stored_next_obs(next_obs, done, info), terminated,
                   truncated, next_obs, returns)
