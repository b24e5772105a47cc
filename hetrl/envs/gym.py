"""Gymnasium environments, always vectorized (n_envs=1 included) with same-step autoreset."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode

from hetrl.schema import ActionSpace, ConfigError


def make_vector_env(
    id: str,
    action_space: str,
    n_envs: int = 1,
    vectorization: str = "sync",
    flatten_observation: bool = False,
    kwargs: dict[str, Any] | None = None,
) -> gym.vector.VectorEnv:
    """`n_envs` copies of a registered gymnasium env, with episode statistics recorded.

    An id of the form `module:EnvId` imports the module that registers it first
    (`shimmy:dm_control/walker-stand-v0`); `flatten_observation` turns a Dict observation
    (DM Control's named features) into one flat vector.

    Same-step autoreset puts the true last observation of an episode in
    `info["final_obs"]`, so the replay stores real transitions across resets.
    """
    envs = gym.make_vec(
        id,
        num_envs=n_envs,
        vectorization_mode=vectorization,
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        wrappers=[gym.wrappers.FlattenObservation] if flatten_observation else None,
        **(kwargs or {}),
    )
    declared = ActionSpace(action_space)
    actual = space_kind(envs.single_action_space)
    if declared != actual:
        raise ConfigError(
            f"env.action_space={declared.value!r} does not match {id}'s "
            f"{envs.single_action_space}: set it to {actual.value!r}"
        )
    return gym.wrappers.vector.RecordEpisodeStatistics(envs)


def space_kind(space: gym.Space) -> ActionSpace:
    if isinstance(space, gym.spaces.Discrete):
        return ActionSpace.discrete
    if isinstance(space, gym.spaces.Box):
        return ActionSpace.continuous
    raise ConfigError(f"action space {space} is neither Discrete nor Box")
