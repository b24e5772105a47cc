"""Save and restore the exact state of a vector env (episode progress, RNGs) for resume."""

from __future__ import annotations

import pickle

import gymnasium as gym
from gymnasium.utils import EzPickle

_REBUILT = ("env", "env_fns")  # rebuilt by the factory, not saved


def _layers(envs: gym.vector.VectorEnv) -> list[gym.vector.VectorEnv]:
    layers = [envs]
    while isinstance(layers[-1], gym.vector.VectorWrapper):
        layers.append(layers[-1].env)
    return layers


def env_state(envs: gym.vector.VectorEnv) -> bytes | None:
    """The envs' full state, or None where it cannot be captured exactly.

    Sub-processes (async vectorization) and envs that pickle by re-construction
    (gymnasium's EzPickle: MuJoCo, Box2D) cannot be restored mid-episode.
    """
    base = _layers(envs)[-1]
    if not isinstance(base, gym.vector.SyncVectorEnv):
        return None
    if any(isinstance(env.unwrapped, EzPickle) for env in base.envs):
        return None
    return pickle.dumps(
        [{k: v for k, v in layer.__dict__.items() if k not in _REBUILT} for layer in _layers(envs)]
    )


def load_env_state(envs: gym.vector.VectorEnv, state: bytes) -> None:
    for layer, saved in zip(_layers(envs), pickle.loads(state)):
        layer.__dict__.update(saved)
