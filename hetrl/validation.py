"""The checks of a composed job config: each schema's range checks, then whether the chosen
options of different groups fit together (naming the choices that would)."""

from __future__ import annotations

from typing import Mapping

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from hetrl.config.enums import ActionSpace, Agents
from hetrl.config.errors import ConfigError, require
from hetrl.options import (
    algos_for,
    algos_for_loop,
    envs_for,
    group_options,
    option_class,
    replays_for,
    schedulers_for,
)


def validate(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """Run every schema's range checks and the cross-group checks; raise ConfigError.

    `choices` maps each config group to the chosen option's name (Hydra's runtime choices).
    """
    OmegaConf.to_object(cfg)  # builds each dataclass, which runs its __post_init__
    _check_algo_fits_env(cfg, choices)
    _check_algo_fits_scheduler(cfg, choices)
    _check_replay_fits_env(cfg, choices)
    _check_algo_fits_platform(cfg, choices)
    _check_actors_fit_scheduler(cfg, choices)


def _check_algo_fits_env(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    learner = get_class(cfg.algo._target_)
    has, agents = ActionSpace(cfg.env.action_space), Agents(cfg.env.agents)
    if not learner.supports(has, agents):
        needs, needs_agents = learner.action_space, learner.agents
        raise ConfigError(
            f"algo={choices['algo']} needs a {needs_agents.value}-agent env with a "
            f"{needs.value} action space, but env={choices['env']} ({cfg.env.id}) is a "
            f"{agents.value}-agent env with a {has.value} one: choose env from "
            f"{envs_for(needs, needs_agents)} or algo from {algos_for(has, agents)}"
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
    if get_class(cfg.algo._target_).on_policy:  # no replay
        return
    agents = Agents(cfg.env.agents)
    has = getattr(get_class(cfg.replay._target_), "agents", Agents.single)
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
