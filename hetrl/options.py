"""The options of the config tree, read from `conf/` (used to name valid choices)."""

from __future__ import annotations

from functools import cache

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from hetrl import CONF_DIR
from hetrl.schema import ActionSpace

GROUPS = ("algo", "env", "platform", "precision", "partitioner", "scheduler", "replay", "tracking")
"""The config groups a user chooses from (`tuned` and `schema` are internal)."""


def group_options(group: str) -> list[str]:
    """Names of the options of one config group, sorted."""
    return sorted(path.stem for path in (CONF_DIR / group).glob("*.yaml"))


@cache
def option_config(group: str, name: str) -> DictConfig:
    """The option's own YAML, without its defaults list applied."""
    return OmegaConf.load(CONF_DIR / group / f"{name}.yaml")


def envs_for(action_space: ActionSpace) -> list[str]:
    """Env options whose action space is of the given kind."""
    return [name for name in group_options("env")
            if option_config("env", name).action_space == action_space.value]


def algos_for(action_space: ActionSpace) -> list[str]:
    """Algo options whose learner needs the given kind of action space."""
    return [name for name in group_options("algo")
            if get_class(option_config("algo", name)._target_).action_space == action_space]
