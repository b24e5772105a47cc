"""The checks of a composed job config: each schema's range checks, then whether the chosen
options of different groups fit together (naming the choices that would)."""

from __future__ import annotations

from typing import Mapping

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from hetrl.config.enums import ActionSpace, Agents, DType, Kind
from hetrl.config.errors import ConfigError, require
from hetrl.options import (
    algos_for,
    algos_for_loop,
    composed_option,
    envs_for,
    group_options,
    option_class,
    replays_for,
    schedulers_for,
)


def validate(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """Run the cross-group checks, then every schema's range checks; raise ConfigError.

    `choices` maps each config group to the chosen option's name (Hydra's runtime choices).
    The cross-group checks come first: options that do not fit together may not even resolve
    (an on-policy algo has no `buffer_size` for a multi-agent replay to size itself by).
    """
    _check_algo_fits_env(cfg, choices)
    _check_algo_fits_scheduler(cfg, choices)
    _check_replay_fits_env(cfg, choices)
    _check_algo_fits_platform(cfg, choices)
    _check_precision_fits_platform(cfg, choices)
    _check_actors_fit_scheduler(cfg, choices)
    _check_scheduler_fits_env(cfg, choices)
    _check_precision_fits_scheduler(cfg, choices)
    _check_partitioner_fits_platform(cfg, choices)
    OmegaConf.to_object(cfg)  # builds each dataclass, which runs its __post_init__


def _check_algo_fits_env(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    learner = get_class(cfg.algo._target_)
    has, agents = ActionSpace(cfg.env.action_space), Agents(cfg.env.agents)
    if not learner.supports(has, agents):
        space = getattr(learner, "action_space", None)  # None: any action space
        acts = f" with {space.value} actions" if space is not None else ""
        raise ConfigError(
            f"algo={choices['algo']} is a {learner.agents.value}-agent algo{acts} and cannot "
            f"act in env={choices['env']} ({cfg.env.id}), a {agents.value}-agent env with a "
            f"{has.value} action space: choose env from {envs_for(learner)} or algo from "
            f"{algos_for(has, agents)}"
        )


def _check_algo_fits_platform(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """A modeled platform plans the learner's step from the learner's task graph."""
    modeled = "name" in cfg.platform  # a ModeledPlatformConfig
    if modeled and not hasattr(get_class(cfg.algo._target_), "task_graph"):
        planned = [a for a in group_options("algo") if hasattr(option_class("algo", a), "task_graph")]
        raise ConfigError(
            f"algo={choices['algo']} describes no task graph, so platform={choices['platform']} "
            f"cannot plan it: choose platform=host or algo from {planned}"
        )


def _check_replay_fits_env(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    agents = Agents(cfg.env.agents)
    has = getattr(get_class(cfg.replay._target_), "agents", Agents.single)
    if agents == Agents.game or not getattr(get_class(cfg.scheduler._target_), "uses_replay", True):
        # games are self-played by a loop that keeps its own window of games: the replay is
        # unused, and only the single-agent one builds beside a game's spaces
        if has != Agents.single:
            raise ConfigError(
                f"replay={choices['replay']} is unused by scheduler={choices['scheduler']} "
                f"(self-play keeps its own window of games) and does not build for "
                f"env={choices['env']}: choose replay from {replays_for(Agents.single)}")
        return
    if has != agents:
        raise ConfigError(
            f"replay={choices['replay']} stores {has.value}-agent transitions, but "
            f"env={choices['env']} is a {agents.value}-agent env: choose replay from "
            f"{replays_for(agents)}"
        )
    sampler = cfg.replay.get("sampler")
    if sampler is not None and "neighbors" in sampler:  # a locality sampler: fixed windows
        refs, neighbors, batch = sampler.refs, sampler.neighbors, cfg.algo.batch_size
        require(refs * neighbors == batch, "replay.sampler.refs", refs,
                f"refs × replay.sampler.neighbors ({neighbors}) = algo.batch_size ({batch})")
        require(neighbors <= cfg.replay.capacity, "replay.sampler.neighbors", neighbors,
                f"integers in [1, replay.capacity = {cfg.replay.capacity}]")


def _check_algo_fits_scheduler(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    on_policy = get_class(cfg.algo._target_).on_policy
    if getattr(get_class(cfg.scheduler._target_), "on_policy", False) != on_policy:
        kind = "an on-policy" if on_policy else "an off-policy"
        raise ConfigError(
            f"algo={choices['algo']} is {kind} algorithm and cannot train with "
            f"scheduler={choices['scheduler']}: choose scheduler from "
            f"{schedulers_for(on_policy)} or algo from {algos_for_loop(not on_policy)}"
        )


def _check_actors_fit_scheduler(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """An actor pool (the class flag `pool`) runs only under a scheduler that drives one."""
    wants_pool = getattr(get_class(cfg.scheduler._target_), "actor_pool", False)
    if get_class(cfg.actors._target_).pool != wants_pool:
        fitting = [o for o in group_options("actors") if option_class("actors", o).pool == wants_pool]
        raise ConfigError(
            f"actors={choices['actors']} does not fit scheduler={choices['scheduler']}: "
            f"choose actors from {fitting} (scheduler=actorq runs an actor pool, the other "
            "schedulers act in the learner's process)"
        )


def _check_scheduler_fits_env(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """A scheduler names the kinds of env (single- or multi-agent) its loop steps."""
    agents = Agents(cfg.env.agents)
    if agents not in get_class(cfg.scheduler._target_).agents:
        fitting = [o for o in group_options("scheduler")
                   if agents in option_class("scheduler", o).agents]
        raise ConfigError(
            f"scheduler={choices['scheduler']} does not step {agents.value}-agent envs such "
            f"as env={choices['env']}: choose scheduler from {fitting}"
        )


def _check_precision_fits_scheduler(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """An actor pool takes a copy of the learner into its processes; some precisions change
    the learner's layers in a way that cannot travel (the class flag `fits_actor_pool`)."""
    if not getattr(get_class(cfg.scheduler._target_), "actor_pool", False):
        return
    if not getattr(get_class(cfg.precision._target_), "fits_actor_pool", True):
        fitting = [p for p in group_options("precision")
                   if getattr(option_class("precision", p), "fits_actor_pool", True)]
        raise ConfigError(
            f"precision={choices['precision']} does not fit scheduler={choices['scheduler']}, "
            f"whose actors take a copy of the learner: choose precision from {fitting} (the "
            "actors' own precision is actors.precision)"
        )


def _check_partitioner_fits_platform(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """A partitioner that names a device names one of the platform's."""
    device = cfg.partitioner.get("device")
    if device is None:
        return
    devices = list(cfg.platform.devices) if "devices" in cfg.platform else ["cpu", "cuda"]
    require(device in devices, "partitioner.device", device,
            f"the devices of platform={choices['platform']}: {devices}")


def _check_precision_fits_platform(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """A precision that follows the plan (mixed) needs a modeled platform to plan on; one
    dtype for the whole step needs, on a modeled platform, a device that computes each kind
    of node in that dtype."""
    modeled = "devices" in cfg.platform  # a ModeledPlatformConfig
    if getattr(get_class(cfg.precision._target_), "needs_plan", False) and not modeled:
        raise ConfigError(
            f"precision={choices['precision']} runs each layer in the dtype of the device its "
            f"plan assigns it, but platform={choices['platform']} is not modeled: choose "
            f"platform from {[p for p in group_options('platform') if _is_modeled(p)]}"
        )
    dtype = _dtype_name(cfg.precision.get("dtype"))
    if modeled and dtype is not None and (gaps := _dtype_gaps(cfg.platform, dtype)):
        precisions = [p for p in group_options("precision")
                      if not _dtype_gaps(cfg.platform,
                                         _dtype_name(composed_option("precision", p).get("dtype")))]
        platforms = [p for p in group_options("platform")
                     if not _is_modeled(p) or not _dtype_gaps(composed_option("platform", p), dtype)]
        raise ConfigError(
            f"precision={choices['precision']} computes every node in {dtype}, but no device of "
            f"platform={choices['platform']} runs {gaps} nodes in it: choose precision from "
            f"{precisions} or platform from {platforms}"
        )


def _dtype_name(dtype: DType | str | None) -> str | None:
    return getattr(dtype, "value", dtype)


def _is_modeled(platform: str) -> bool:
    return "devices" in composed_option("platform", platform)


def _dtype_gaps(platform: DictConfig, dtype: str | None) -> list[str]:
    """The node kinds that no device of a modeled platform computes in `dtype`."""
    if dtype is None:
        return []
    return [kind.value for kind in Kind
            if not any(kind.value in device.runs and dtype in device.rates
                       for device in platform.devices.values())]
