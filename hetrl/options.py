"""The options of the config tree, read from `conf/` (used to name valid choices)."""

from __future__ import annotations

from functools import cache
from typing import Any, Mapping

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from hetrl.config.enums import ActionSpace, Agents
from hetrl.paths import CONF_DIR

GROUPS = ("algo", "env", "platform", "precision", "partitioner", "scheduler", "replay", "actors",
          "tracking")
"""The config groups a user chooses from (`tuned` and `schema` are internal; `replay/sampler`
nests in the multi-agent replays)."""


def compose_job(*overrides: str) -> tuple[DictConfig, dict[str, str]]:
    """The job config and runtime choices `python -m hetrl <overrides>` would get, composed
    in-process (for tests and benchmarks). Needs `hetrl.config.store.register()` first."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides), return_hydra_config=True)
    GlobalHydra.instance().clear()
    choices = dict(cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg, choices


def group_options(group: str) -> list[str]:
    """Names of the options of one config group (e.g. `algo`, `replay/sampler`), sorted."""
    return sorted(path.stem for path in (CONF_DIR / group).glob("*.yaml"))


@cache
def option_yaml(group: str, name: str) -> DictConfig:
    """The option's YAML as written, its defaults list included and not applied. An option
    written at the top level (`# @package _global_`: scheduler=selfplay's options are the run's
    `selfplay` node) is read as the node its group's key points at."""
    path = CONF_DIR / group / f"{name}.yaml"
    written = OmegaConf.load(path)
    if not (path.read_text().startswith("# @package _global_") and group in written):
        return written  # a group's own node, or a tuned file (which sets several groups)
    return OmegaConf.merge({"defaults": written.defaults}, written[group])


def option_schema(group: str, name: str) -> str:
    """The ConfigStore path of the option's schema (`schema/<group>/<name>`), the first
    entry of its defaults list."""
    return _schema_entry(group, name)[0]


def _schema_entry(group: str, name: str) -> tuple[str, str]:
    """The option's schema path and the key of the node it types (`/schema/...@_here_`: the
    group's node; `@selfplay`: the run's `selfplay` node)."""
    path, _, package = option_yaml(group, name).defaults[0].partition("@")
    return path.removeprefix("/"), group if package in ("", "_here_") else package


def typed_config(config: Mapping[str, Any], choices: Mapping[str, str]) -> DictConfig:
    """A job config kept as plain data (a checkpoint's) under the schemas it was composed
    with: the run's schema, then each group's node merged onto its chosen option's schema, as
    composing does. So it validates and instantiates as the composed config did (a modeled
    platform's devices and links are dataclasses again, not dicts). A run-level key added
    since the checkpoint was written takes its value from conf/config.yaml."""
    store = ConfigStore.instance()
    cfg = OmegaConf.merge(store.load("run_schema.yaml").node, run_defaults(), config)
    for group in GROUPS:
        path, key = _schema_entry(group, choices[group])
        cfg[key] = OmegaConf.merge(store.load(f"{path}.yaml").node, cfg[key])
    return cfg


@cache
def run_defaults() -> DictConfig:
    """conf/config.yaml's run-level values (`seed`, `steps`, ...), its defaults list and
    Hydra's node aside."""
    written = OmegaConf.load(CONF_DIR / "config.yaml")
    return OmegaConf.masked_copy(written, [k for k in written if k not in ("defaults", "hydra")])


def composed_option(group: str, name: str) -> DictConfig:
    """The option's node as it composes: its schema's defaults under its own values (nested
    groups of its defaults list, such as a replay's sampler, left out)."""
    own = option_yaml(group, name).copy()
    own.pop("defaults")
    schema = ConfigStore.instance().load(f"{option_schema(group, name)}.yaml").node
    return OmegaConf.merge(schema, own)


def made_option(group: str, name: str, **values: Any) -> Any:
    """What the option's `_target_` makes of its composed node, `values` in place of its own
    (for tests and benchmarks: the YAML stays the one place of its defaults). Needs
    `hetrl.config.store.register()` first."""
    return instantiate(composed_option(group, name), **values)


def option_class(group: str, name: str) -> type:
    """The class an option's `_target_` names."""
    return get_class(option_yaml(group, name)._target_)


def envs_for(learner: type) -> list[str]:
    """Env options the learner class can act in (its `supports` their kinds)."""
    return [name for name in group_options("env")
            if learner.supports(ActionSpace((node := composed_option("env", name)).action_space),
                                Agents(node.agents))]


def algos_for(action_space: ActionSpace, agents: Agents = Agents.single) -> list[str]:
    """Algo options whose learner can act in the given kinds of env."""
    return [name for name in group_options("algo")
            if option_class("algo", name).supports(action_space, agents)]


def replays_for(agents: Agents) -> list[str]:
    """Replay options that store transitions of single- or multi-agent envs."""
    return [name for name in group_options("replay")
            if getattr(option_class("replay", name), "agents", Agents.single) == agents]


def algos_for_loop(on_policy: bool) -> list[str]:
    """Algo options that are on-policy (or off-policy)."""
    return [name for name in group_options("algo")
            if option_class("algo", name).on_policy == on_policy]


def schedulers_for(on_policy: bool) -> list[str]:
    """Scheduler options whose loop trains on-policy (or off-policy) algos."""
    return [name for name in group_options("scheduler")
            if option_class("scheduler", name).needs.on_policy == on_policy]
