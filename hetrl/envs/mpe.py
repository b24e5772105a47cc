"""PettingZoo MPE envs (mpe2, parallel API) as a small vector env of per-agent arrays.

The sync loop sees what it sees of a gymnasium vector env: `num_envs`, `action_space`,
`single_observation_space`, `single_action_space`, `reset(seed)`, `step()` with same-step
autoreset (`info["final_obs"]`) and episode statistics (`info["episode"]`,
`info["_episode"]`). Arrays are shaped (n_envs, n_agents, ...): observations of agents with
fewer features (simple_tag's prey) are zero-padded to the widest agent's, and the padding is
marked in the observation space by bounds [0, 0] where real features have (-inf, inf).
"""

from __future__ import annotations

import importlib
from typing import Any

import gymnasium as gym
import numpy as np

from hetrl.config.enums import ReturnDefinition
from hetrl.config.errors import ConfigError


def mpe_kwargs(id: str, n_agents: int) -> dict[str, int]:
    """The entity counts of an MPE scenario for `n_agents` learning agents (extract B.3/E.2).

    simple_tag: n predators, max(1, n/3) prey, max(2, n/3) obstacles (3 -> 1 prey, 2
    obstacles, 24 -> 8 and 8, as the paper's observation sizes say). simple_spread: n agents
    on n landmarks.
    """
    if id.startswith("simple_tag"):
        return {"num_adversaries": n_agents, "num_good": max(1, n_agents // 3),
                "num_obstacles": max(2, n_agents // 3)}
    if id.startswith("simple_spread"):
        return {"N": n_agents}
    return {}


class MpeVectorEnv:
    """`n_envs` copies of one mpe2 env, stepped in turn in this process.

    Each copy is mpe2's AEC env (`raw_env`) stepped agent by agent through PettingZoo's AEC
    API, as mpe2's `parallel_env` steps it, less what that wrapper adds per step: it observes
    every agent before its move (an observation it drops) and routes every call through
    three wrappers; at a cycle's end the world steps, and the rewards, ends and observations
    read are the same (about half the env's time on simple_spread with 3 agents).
    """

    def __init__(
        self,
        id: str,
        n_agents: int = 3,
        n_envs: int = 1,
        max_cycles: int = 25,
        returns: str = "team_sum",
        action_space: str = "discrete",  # declared for the config checks (hetrl.validation)
        agents: str = "multi",  # likewise
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        try:
            module = importlib.import_module(f"mpe2.{id}")
        except ImportError as err:
            raise ConfigError(f"env.id={id!r} is not an mpe2 env (e.g. simple_tag_v3, "
                              f"simple_spread_v3): {err}") from err
        scenario = {**mpe_kwargs(id, n_agents), **(kwargs or {})}
        self.envs = [module.raw_env(max_cycles=max_cycles, continuous_actions=False,
                                    **scenario) for _ in range(n_envs)]
        self.num_envs = n_envs
        self.names: list[str] = list(self.envs[0].possible_agents)
        self.returns = ReturnDefinition(returns)
        obs_spaces = [self.envs[0].observation_space(a) for a in self.names]
        self.obs_dims = [int(space.shape[0]) for space in obs_spaces]
        n, width = len(self.names), max(self.obs_dims)
        real = np.arange(width)[None, :] < np.array(self.obs_dims)[:, None]
        self.single_observation_space = gym.spaces.Box(
            np.where(real, -np.inf, 0.0).astype(np.float32),
            np.where(real, np.inf, 0.0).astype(np.float32), (n, width), np.float32)
        n_actions = [int(self.envs[0].action_space(a).n) for a in self.names]
        self.single_action_space = gym.spaces.MultiDiscrete(n_actions)
        self.action_space = gym.spaces.MultiDiscrete(np.tile(n_actions, (n_envs, 1)))
        self._episode_r = np.zeros((n_envs, n), dtype=np.float64)
        self._episode_l = np.zeros(n_envs, dtype=np.int64)

    @property
    def n_agents(self) -> int:
        """Every agent the learner trains (simple_tag's prey included)."""
        return len(self.names)

    def _observe(self, env: Any, out: np.ndarray) -> None:
        """Every agent's observation of `env` into `out` (n_agents, width), zero-padded."""
        for i, name in enumerate(self.names):
            out[i, : self.obs_dims[i]] = env.observe(name)

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict]:
        obs = np.zeros((self.num_envs, *self.single_observation_space.shape), np.float32)
        for k, env in enumerate(self.envs):
            env.reset(seed=None if seed is None else seed + k)
            self._observe(env, obs[k])
        self._episode_r[:] = 0
        self._episode_l[:] = 0
        return obs, {}

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, ...]:
        """One step of every env; an env whose episode ended is reset in the same step."""
        n_envs, n = self.num_envs, self.n_agents
        obs = np.zeros((n_envs, *self.single_observation_space.shape), np.float32)
        rewards = np.zeros((n_envs, n), np.float32)
        terminated = np.zeros(n_envs, bool)
        truncated = np.zeros(n_envs, bool)
        for k, env in enumerate(self.envs):
            for action in actions[k].tolist():  # in the agents' order: the last steps the world
                env.step(action)
            self._observe(env, obs[k])
            rewards[k] = [env.rewards[a] for a in self.names]
            terminated[k] = all(env.terminations[a] for a in self.names)
            truncated[k] = not terminated[k] and all(env.truncations[a] for a in self.names)
        self._episode_r += rewards
        self._episode_l += 1
        done = terminated | truncated
        info: dict[str, Any] = {}
        if done.any():
            per_agent = self._episode_r[done]
            team = per_agent.sum(1) if self.returns == ReturnDefinition.team_sum \
                else per_agent.mean(1)
            info["final_obs"] = obs.copy()
            info["_episode"] = done
            info["episode"] = {"r": np.zeros(n_envs), "l": np.zeros(n_envs, np.int64)}
            info["episode"]["r"][done] = team
            info["episode"]["l"][done] = self._episode_l[done]
            for k in np.flatnonzero(done):
                self.envs[k].reset()
                self._observe(self.envs[k], obs[k])
            self._episode_r[done] = 0
            self._episode_l[done] = 0
        return obs, rewards, terminated, truncated, info

    def close(self) -> None:
        for env in self.envs:
            env.close()
