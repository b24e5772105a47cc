"""Reading a vector-env step under gymnasium's same-step autoreset (hetrl.envs.gym): an env
whose episode ended returns the next episode's first observation already, and the true last
one in `info["final_obs"]`."""

from __future__ import annotations

import numpy as np


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
