"""Gymnasium environments, always vectorized (n_envs=1 included) with same-step autoreset."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode

from hetrl.config.enums import ActionSpace
from hetrl.config.errors import ConfigError


def make_vector_env(
    id: str,
    action_space: str,
    n_envs: int = 1,
    vectorization: str = "sync",
    flatten_observation: bool = False,
    clip_rewards: bool = False,
    kwargs: dict[str, Any] | None = None,
    agents: str = "single",  # declared for the config checks (hetrl.validation)
) -> gym.vector.VectorEnv:
    """`n_envs` copies of a registered gymnasium env, with episode statistics recorded.

    `id` may name the module that registers it ("ale_py:ALE/Breakout-v5"). Same-step
    autoreset puts the true last observation of an episode in `info["final_obs"]`, so the
    replay stores real transitions across resets. Episode returns are recorded before any
    reward clipping, so they are the game's score.
    `flatten_observation` turns a Dict observation (DM Control's named features,
    "shimmy:dm_control/walker-stand-v0") into one flat vector.
    """
    autoreset = {"autoreset_mode": AutoresetMode.SAME_STEP}
    if vectorization == "vector_entry_point":  # the env's own batched class takes it directly
        kwargs, autoreset = {**(kwargs or {}), **autoreset}, {}
    envs = gym.make_vec(
        id,
        num_envs=n_envs,
        vectorization_mode=vectorization,
        vector_kwargs=autoreset or None,
        **({"wrappers": [gym.wrappers.FlattenObservation]} if flatten_observation else {}),
        **(kwargs or {}),
    )
    declared = ActionSpace(action_space)
    actual = space_kind(envs.single_action_space)
    if declared != actual:
        raise ConfigError(
            f"env.action_space={declared.value!r} does not match {id}'s "
            f"{envs.single_action_space}: set it to {actual.value!r}"
        )
    envs = gym.wrappers.vector.RecordEpisodeStatistics(envs)
    return gym.wrappers.vector.ClipReward(envs, -1.0, 1.0) if clip_rewards else envs


def space_kind(space: gym.Space) -> ActionSpace:
    if isinstance(space, gym.spaces.Discrete):
        return ActionSpace.discrete
    if isinstance(space, gym.spaces.Box):
        return ActionSpace.continuous
    raise ConfigError(f"action space {space} is neither Discrete nor Box")
