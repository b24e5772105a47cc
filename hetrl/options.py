"""The options of the config tree, read from `conf/` (used to name valid choices)."""

from __future__ import annotations

from functools import cache

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf, open_dict

from hetrl import CONF_DIR
from hetrl.schema import ActionSpace

GROUPS = ("algo", "env", "platform", "precision", "partitioner", "scheduler", "replay", "actors",
          "tracking")
"""The config groups a user chooses from (`tuned` and `schema` are internal)."""


def compose_job(*overrides: str) -> tuple[DictConfig, dict[str, str]]:
    """The job config and runtime choices `python -m hetrl <overrides>` would get, composed
    in-process (for tests and benchmarks). Needs `hetrl.schema.register()` first."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides), return_hydra_config=True)
    GlobalHydra.instance().clear()
    choices = dict(cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg, choices


def group_options(group: str) -> list[str]:
    """Names of the options of one config group, sorted."""
    return sorted(path.stem for path in (CONF_DIR / group).glob("*.yaml"))


@cache
def option_config(group: str, name: str) -> DictConfig:
    """The option's own YAML, without its defaults list applied."""
    return OmegaConf.load(CONF_DIR / group / f"{name}.yaml")


def option_node(group: str, name: str) -> DictConfig:
    """The option's config node as it composes (its schema defaults under its own values)."""
    own = option_config(group, name).copy()
    schema = own.pop("defaults")[0].split("@")[0].removeprefix("/")
    return OmegaConf.merge(ConfigStore.instance().load(f"{schema}.yaml").node, own)


def option_class(group: str, name: str) -> type:
    """The class an option's `_target_` names."""
    return get_class(option_config(group, name)._target_)


def envs_for(action_space: ActionSpace) -> list[str]:
    """Env options whose action space is of the given kind."""
    return [name for name in group_options("env")
            if option_config("env", name).action_space == action_space.value]


def algos_for(action_space: ActionSpace) -> list[str]:
    """Algo options whose learner can act in the given kind of action space."""
    return [name for name in group_options("algo")
            if option_class("algo", name).supports(action_space)]


def algos_for_loop(on_policy: bool) -> list[str]:
    """Algo options that are on-policy (or off-policy)."""
    return [name for name in group_options("algo")
            if option_class("algo", name).on_policy == on_policy]


def schedulers_for(on_policy: bool) -> list[str]:
    """Scheduler options whose loop trains on-policy (or off-policy) algos."""
    return [name for name in group_options("scheduler")
            if getattr(option_class("scheduler", name), "on_policy", False) == on_policy]
