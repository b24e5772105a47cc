"""The checks of a composed job config: each schema's range checks, then whether the chosen
options of different groups fit together (naming the choices that would).

What a loop, an actors option and a precision need of the others is declared once on their
classes (`LoopNeeds`, `Acting`, `PrecisionNeeds`) and read here, through `_loop`, `_acting`
and `_precision`: a new option of those groups adds no case here."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from hetrl.checks import check_known_keys
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
from hetrl.scheduler.base import LoopNeeds, needs_of

if TYPE_CHECKING:  # the config checks import this module before torch: these import it
    from hetrl.actors.base import Acting
    from hetrl.precision.base import PrecisionNeeds


def validate(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """Run the cross-group checks, then every schema's range checks; raise ConfigError.

    `choices` maps each config group to the chosen option's name (Hydra's runtime choices).
    The cross-group checks come first: options that do not fit together may not even resolve
    (an on-policy algo has no `buffer_size` for a multi-agent replay to size itself by).
    """
    _check_algo_fits_env(cfg, choices)
    _check_algo_fits_scheduler(cfg, choices)
    _check_replay_fits_env(cfg, choices)
    _check_replay_fits_algo(cfg, choices)
    _check_algo_fits_platform(cfg, choices)
    _check_precision_fits_platform(cfg, choices)
    _check_actors_fit_scheduler(cfg, choices)
    _check_scheduler_fits_env(cfg, choices)
    _check_precision_fits_scheduler(cfg, choices)
    _check_precision_fits_trainers(cfg, choices)
    _check_partitioner_fits_platform(cfg, choices)
    _check_stop_return_fits_scheduler(cfg, choices)
    check_known_keys(cfg)
    _check_derived_keys(cfg)
    _check_finite(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    OmegaConf.to_object(cfg)  # builds each dataclass, which runs its __post_init__
    _check_replay_holds_a_batch(cfg, choices)
    _check_updates_happen(cfg, choices)


DERIVED_KEYS = {"algo.n_envs": "env.n_envs", "algo.total_steps": "steps"}
"""Keys whose schema takes their value from another key: set that one."""


def _check_derived_keys(cfg: DictConfig) -> None:
    for key, source in DERIVED_KEYS.items():
        value, given = OmegaConf.select(cfg, key), OmegaConf.select(cfg, source)
        require(value is None or value == given, key, value,
                f"{source}'s ({given}): {key} follows {source}, so set {source}={value}")


def _check_finite(tree: Any, key: str = "") -> None:
    """No float of any schema is infinite or NaN (`algo.lr=inf` would train on NaN losses)."""
    if isinstance(tree, dict):
        for name, value in tree.items():
            _check_finite(value, f"{key}.{name}" if key else str(name))
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            _check_finite(value, f"{key}.{i}")  # as a command line sets it: links.0.bw=...
    elif isinstance(tree, float) and not math.isfinite(tree):
        raise ConfigError(f"{key}={tree!r} is invalid: valid values are finite numbers")


def _loop(cfg_or_option: DictConfig | str) -> LoopNeeds:
    """The needs of the chosen loop (a config) or of a scheduler option (its name)."""
    if isinstance(cfg_or_option, str):
        return needs_of(option_class("scheduler", cfg_or_option))
    return needs_of(get_class(cfg_or_option.scheduler._target_))


def _acting(cfg_or_option: DictConfig | str) -> Acting:
    """Where the chosen actors option (a config) or an actors option (its name) acts."""
    if isinstance(cfg_or_option, str):
        return option_class("actors", cfg_or_option).acting
    return get_class(cfg_or_option.actors._target_).acting


def _precision(cfg_or_option: DictConfig | str) -> PrecisionNeeds:
    """The needs of the chosen precision (a config) or of a precision option (its name)."""
    if isinstance(cfg_or_option, str):
        return option_class("precision", cfg_or_option).needs
    return get_class(cfg_or_option.precision._target_).needs


def _check_replay_holds_a_batch(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """An off-policy learner samples `algo.batch_size` transitions from a replay of
    `replay.capacity` (unless its loop keeps its own data: `LoopNeeds.replay`)."""
    if get_class(cfg.algo._target_).on_policy or not _loop(cfg).replay:
        return
    batch = cfg.algo.batch_size
    require(cfg.replay.capacity >= batch, "replay.capacity", cfg.replay.capacity,
            f"integers >= algo.batch_size ({batch}) of algo={choices['algo']}")


def _check_updates_happen(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """An off-policy learner updates once more than `algo.learning_starts` env steps are in:
    a budget of no more than that would finish without a single update."""
    if get_class(cfg.algo._target_).on_policy:
        return
    starts, steps = cfg.algo.get("learning_starts"), cfg.steps
    if starts is None:  # a learner without a replay warm-up (alphazero)
        return
    if steps <= starts:
        raise ConfigError(
            f"steps={steps} is invalid: algo={choices['algo']} (env={choices['env']}) starts "
            f"learning after algo.learning_starts={starts} env steps, so this run would make "
            f"no update: give a longer budget (steps={max(2 * starts, starts + 1)}) or start "
            f"learning earlier (algo.learning_starts={steps // 2})"
        )


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
    if agents == Agents.game or not _loop(cfg).replay:
        # a loop that keeps its own data (games, rollouts) leaves the replay unused, and only
        # the single-agent one builds beside any env's spaces
        if has != Agents.single:
            raise ConfigError(
                f"replay={choices['replay']} is unused by scheduler={choices['scheduler']} "
                f"(it keeps its own data) and does not build for env={choices['env']}: "
                f"choose replay from {replays_for(Agents.single)}")
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


def _check_replay_fits_algo(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """A prioritized replay (the class flag `prioritized`) draws batches for a learner that
    trains from a replay and hands back TD errors: an off-policy one."""
    learner = get_class(cfg.algo._target_)
    if getattr(get_class(cfg.replay._target_), "prioritized", False) and learner.on_policy:
        space, agents = ActionSpace(cfg.env.action_space), Agents(cfg.env.agents)
        off_policy = [a for a in algos_for(space, agents) if a in algos_for_loop(False)]
        replays = [r for r in replays_for(agents)
                   if not getattr(option_class("replay", r), "prioritized", False)]
        raise ConfigError(
            f"replay={choices['replay']} weighs an off-policy learner's TD loss, but "
            f"algo={choices['algo']} is on-policy (it trains on its own rollouts, with no "
            f"replay): choose replay from {replays} or algo from {off_policy}"
        )


def _check_algo_fits_scheduler(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    on_policy = get_class(cfg.algo._target_).on_policy
    if _loop(cfg).on_policy != on_policy:
        kind = "an on-policy" if on_policy else "an off-policy"
        raise ConfigError(
            f"algo={choices['algo']} is {kind} algorithm and cannot train with "
            f"scheduler={choices['scheduler']}: choose scheduler from "
            f"{schedulers_for(on_policy)} or algo from {algos_for_loop(not on_policy)}"
        )


def _check_actors_fit_scheduler(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """An actor pool (`Acting.pool`) runs only under a loop that drives one
    (`LoopNeeds.actor_pool`); a loop that places workers of its own (`LoopNeeds.ray_workers`)
    also takes a Ray option (`Acting.ray`), which places them on Ray (so it needs one)."""
    loop, acting = _loop(cfg), _acting(cfg)

    def fits(acts: Acting) -> bool:
        return acts.pool == loop.actor_pool or (loop.ray_workers is not None and acts.ray)

    if loop.ray_workers is not None and acting.ray:
        workers = OmegaConf.select(cfg, loop.ray_workers)
        if workers < 1:
            local = [o for o in group_options("actors") if not _acting(o).pool]
            raise ConfigError(
                f"actors={choices['actors']} places scheduler={choices['scheduler']}'s workers "
                f"on Ray, but {loop.ray_workers} is {workers}: set {loop.ray_workers} >= 1 or "
                f"choose actors from {local}")
        return
    if not fits(acting):
        fitting = [o for o in group_options("actors") if fits(_acting(o))]
        if loop.actor_pool:
            where = "drives an actor pool"
        else:
            where = "acts in the learner's process"
            if loop.ray_workers is not None:
                on_ray = ", ".join(f"actors={o}" for o in group_options("actors")
                                   if _acting(o).ray)
                where += f", or places its {loop.ray_workers} on Ray ({on_ray})"
        raise ConfigError(
            f"actors={choices['actors']} does not fit scheduler={choices['scheduler']}, which "
            f"{where}: choose actors from {fitting}"
        )


def _check_scheduler_fits_env(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """A scheduler names the kinds of env (single- or multi-agent) its loop steps."""
    agents = Agents(cfg.env.agents)
    if agents not in _loop(cfg).agents:
        fitting = [o for o in group_options("scheduler") if agents in _loop(o).agents]
        raise ConfigError(
            f"scheduler={choices['scheduler']} does not step {agents.value}-agent envs such "
            f"as env={choices['env']}: choose scheduler from {fitting}"
        )


def _check_stop_return_fits_scheduler(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """`stop_return` ends a loop on its episodes' return_mean_100, which a loop without
    episode returns (`LoopNeeds.episode_returns`: self-play) does not have."""
    if cfg.stop_return is None or _loop(cfg).episode_returns:
        return
    fitting = [o for o in group_options("scheduler") if _loop(o).episode_returns]
    raise ConfigError(
        f"stop_return={cfg.stop_return} ends a job on its episodes' return_mean_100, which "
        f"scheduler={choices['scheduler']} does not have: set stop_return=null or choose "
        f"scheduler from {fitting}"
    )


def _check_precision_fits_scheduler(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """An actor pool takes a copy of the learner into its processes; some precisions change
    the learner's layers in a way that cannot travel (`PrecisionNeeds.travels`)."""
    if not _loop(cfg).actor_pool:
        return
    if not _precision(cfg).travels:
        fitting = [p for p in group_options("precision") if _precision(p).travels]
        raise ConfigError(
            f"precision={choices['precision']} does not fit scheduler={choices['scheduler']}, "
            f"whose actors take a copy of the learner: choose precision from {fitting} (the "
            "actors' own precision is actors.precision)"
        )


def _check_precision_fits_trainers(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """Data-parallel trainer ranks other than rank 0 train in float32 (`LoopNeeds.
    trainer_ranks`): with any other precision DDP would average gradients of different
    numerics (fp16 scales rank 0's loss alone)."""
    key = _loop(cfg).trainer_ranks
    trainers = 1 if key is None else OmegaConf.select(cfg, key)
    if trainers > 1 and _dtype_name(cfg.precision.get("dtype")) != "float32":
        raise ConfigError(
            f"precision={choices['precision']} does not fit {key}={trainers}: the ranks "
            "besides rank 0 train in float32, and DDP would average their gradients with "
            f"rank 0's of other numerics: choose precision=fp32 or {key}=1")


def _check_partitioner_fits_platform(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """A partitioner that names a device names one of the platform's."""
    device = cfg.partitioner.get("device")
    if device is None:
        return
    devices = list(cfg.platform.devices) if "devices" in cfg.platform else ["cpu", "cuda"]
    require(device in devices, "partitioner.device", device,
            f"the devices of platform={choices['platform']}: {devices}")


def _check_precision_fits_platform(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """A precision that follows the plan (mixed) needs a plan: a modeled platform, or the
    host measuring the learner's step (`platform.measure_layers`, a learner with a task
    graph); one dtype for the whole step needs, on a modeled platform, a device that computes
    each kind of node in that dtype."""
    modeled = "devices" in cfg.platform  # a ModeledPlatformConfig
    if _precision(cfg).plan and not modeled:
        name = choices["precision"]
        if not cfg.platform.get("measure_layers", False):
            raise ConfigError(
                f"platform.measure_layers=false is invalid with precision={name}: it runs each "
                f"layer in the dtype its plan chose, and platform={choices['platform']} plans "
                f"from the layers it measures: set platform.measure_layers=true or choose "
                f"platform from {[p for p in group_options('platform') if _is_modeled(p)]}")
        if not hasattr(get_class(cfg.algo._target_), "task_graph"):
            planned = [a for a in group_options("algo")
                       if hasattr(option_class("algo", a), "task_graph")]
            raise ConfigError(
                f"precision={name} runs each layer in the dtype its plan chose, but "
                f"algo={choices['algo']} describes no task graph to plan: choose algo from "
                f"{planned} or precision from "
                f"{[p for p in group_options('precision') if p != name]}")
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
