"""`build(cfg)`: the one place a job's components are made from its config.

`experiment.run`, the tests and the benchmarks all build through here, so a job is put
together the same way wherever it runs (as Sample Factory's serial and parallel runners
build the same components and differ only in where they run them). Its first parts, the
platform and the envs (`Parts`), are what the last checks of a config need: a job makes them
with `preflight(cfg)` before it opens its run, and build() goes on from them.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Callable

import gymnasium as gym
import psutil
import torch
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from hetrl.actors.base import Actors, Workers
from hetrl.actors.pool import ActorPool
from hetrl.actors.worker import cpu_copy
from hetrl.algos.base import Learner, OffPolicyLearner
from hetrl.compiled.acting import choose_acting
from hetrl.compiled.choose import UpdateChoice, choose_update, job_batch
from hetrl.config.env_checks import env_errors
from hetrl.config.errors import ConfigError, unwrapped
from hetrl.config.run import compile_mode
from hetrl.partition.costs import Plan
from hetrl.plan_record import plan_key, record_plan, recorded_plan
from hetrl.planning import StepPlan, plan_measured_step, plan_step
from hetrl.platform.host import HostPlatform, cpu_name, uniform_dtypes
from hetrl.platform.measure import compare_updates
from hetrl.platform.model import ModeledPlatform
from hetrl.precision.base import Precision
from hetrl.precision.native import emulates
from hetrl.replay.base import Replay
from hetrl.scheduler.base import Loop, needs_of
from hetrl.seeding import host_rng_states, seed_everything, set_rng_states

log = logging.getLogger("hetrl")


@dataclass
class Components:
    """Everything one job trains with, built and wired, before its loop starts."""

    envs: gym.vector.VectorEnv
    learner: Learner
    replay: Replay  # unused by on-policy learners
    precision: Precision  # already applied to the learner
    platform: HostPlatform | ModeledPlatform
    step_plan: StepPlan | None  # the learner's step planned on the platform, if it has one
    actors: Actors  # where acting happens and in which precision
    scheduler: Loop  # the `scheduler` option: the training loop
    make_envs: Callable[..., gym.vector.VectorEnv]  # more envs like `envs` (keyword overrides)
    update_choice: UpdateChoice | None = None  # compiled or eager (`compile`), and why
    workers: Workers | None = None  # the loop's own (`LoopNeeds.workers`), not started
    acting_choice: UpdateChoice | None = None  # an actor pool's policy forward: the same

    @property
    def spaces(self) -> dict[str, gym.Space]:
        return spaces(self.envs)


def spaces(envs: gym.vector.VectorEnv) -> dict[str, gym.Space]:
    """One env's spaces, as the learner and replay constructors take them."""
    return {"obs_space": envs.single_observation_space, "act_space": envs.single_action_space}


def build(cfg: DictConfig, plan: bool = True, planned: StepPlan | None = None,
          parts: Parts | None = None) -> Components:
    """Instantiate every component the config names, in the order that makes runs
    reproducible (the seed is set before the first env and network are made), plan the
    learner's step on the platform (unless `plan` is false: a caller that needs only the
    parts) and apply the precision policy to the learner.

    `planned` is the step plan of a resumed job's checkpoint: it is applied as it was, not
    planned again, since on the host the plan stands on timings, and timed again it could
    choose other dtypes than those the job trained in. `parts`: the platform and envs the
    job made before it opened its run (`preflight`); made here where none are given."""
    parts = parts or make_parts(cfg)
    set_rng_states(parts.rng)  # as making the envs left them, whatever ran since (a run opened)
    platform, envs = parts.platform, parts.envs
    env_spaces = spaces(envs)
    learner = instantiate(cfg.algo, **env_spaces, device=platform.device)
    precision = instantiate(cfg.precision)
    step_plan = planned or (_plan(cfg, learner, platform, precision, env_spaces) if plan
                            else None)
    graph, applied = (step_plan.graph, step_plan.applied) if step_plan else (None, None)
    precision.apply(learner, graph, applied, platform)
    replay = instantiate(cfg.replay, **env_spaces, device=platform.device)
    update_choice = None
    if plan:  # what a job trains with; callers that need only the parts stay eager
        update_choice = choose_update(learner, compile_mode(cfg.compile),
                                      learner.updates_in(cfg.steps),
                                      job_batch(learner, env_spaces, replay),
                                      partial(precision.autocast, platform.device))
        log.info("%s", update_choice.line())
    actors, scheduler = instantiate(cfg.actors), instantiate(cfg.scheduler)
    make_workers = needs_of(type(scheduler)).workers
    acting_choice = None
    if plan and needs_of(type(scheduler)).actor_pool:  # ActorQ's and PEARL's actors act elsewhere
        acting_choice = _acting_choice(cfg, learner, actors, envs)
    return Components(
        envs=envs, learner=learner, update_choice=update_choice, replay=replay,
        precision=precision, platform=platform, step_plan=step_plan, actors=actors,
        scheduler=scheduler, make_envs=parts.make_envs, acting_choice=acting_choice,
        workers=(make_workers(scheduler, actors, learner, envs, cfg.seed) if make_workers
                 else None),
    )


def _acting_choice(cfg: DictConfig, learner: OffPolicyLearner, actors: ActorPool,
                   envs: gym.vector.VectorEnv) -> UpdateChoice:
    """An actor pool's compile choice for its policy forward (`hetrl.compiled.acting`), on a
    CPU copy of the policy as the actors get it, at one actor's batch; the actors' copies of
    the learner carry it (`compile_acting`)."""
    probe = cpu_copy(learner)
    forwards = max(0, cfg.steps - learner.learning_starts) // envs.num_envs
    choice = choose_acting(probe.policy(), actors.spec,
                           probe.obs_tensor(envs.observation_space.sample()),
                           compile_mode(cfg.compile), forwards, actors.n)
    learner.compile_acting = choice.compiled
    log.info("%s", choice.line())
    return choice


@dataclass
class Parts:
    """What build() makes first: the platform, then (the seed set) the envs, with the random
    generators' states after them. They are what the last checks of a config need (a device
    this machine lacks, the env's real action space, a replay too big for its spaces)."""

    platform: HostPlatform | ModeledPlatform
    envs: gym.vector.VectorEnv
    make_envs: Callable[..., gym.vector.VectorEnv]
    rng: dict[str, Any]  # the generators' states once the envs are made (host_rng_states)

    def close(self) -> None:
        self.envs.close()


def make_parts(cfg: DictConfig) -> Parts:
    """The platform and the envs, the replay's memory weighed for their spaces: what a
    ConfigError the constructors raise, or an unknown env id or kwarg, names."""
    platform = instantiate(cfg.platform)
    seed_everything(cfg.seed)
    make_envs = env_maker(cfg)
    with env_errors(cfg):  # an unknown env id or kwarg: the config's
        envs = make_envs()
    try:
        check_replay_memory(cfg, **spaces(envs))
    except BaseException:
        envs.close()
        raise
    return Parts(platform, envs, make_envs, host_rng_states())


def preflight(cfg: DictConfig) -> Parts | None:
    """A job's first parts (`make_parts`), made before it opens its run, so that what they
    show of the config fails before a run or a store exists; build() goes on from them.

    A ConfigError is raised as itself (not in Hydra's wrapper). Any other error is not the
    config's: it is left for build(), which makes the parts again inside the run, where the
    run records what fails (FAILED, with error.txt): None."""
    try:
        with unwrapped(ConfigError):
            return make_parts(cfg)
    except ConfigError:
        raise
    except Exception:  # noqa: BLE001 - recorded by the run, see above
        log.debug("preflight: left to build()", exc_info=True)
        return None


def env_maker(cfg: DictConfig) -> Callable[..., gym.vector.VectorEnv]:
    """Makes the job's envs (keyword arguments override the env's config: `n_envs=1`)."""
    return partial(instantiate, OmegaConf.to_container(cfg.env, resolve=True))


def check_replay_memory(cfg: DictConfig, obs_space: gym.Space, act_space: gym.Space,
                        available: int | None = None) -> None:
    """Fail before the replay is allocated when its arrays (its class's `nbytes` for these
    spaces) would not fit in the memory available now (or `available` bytes), naming the
    key that sizes it, the bytes needed and the bytes available."""
    nbytes = getattr(get_class(cfg.replay._target_), "nbytes", None)
    if nbytes is None:
        return
    capacity = cfg.replay.capacity
    needed = nbytes(capacity, obs_space, act_space, cfg.steps)
    if available is None:
        available = psutil.virtual_memory().available
    if needed > available:
        sized_by_algo = OmegaConf.is_interpolation(cfg.replay, "capacity")
        key = "algo.buffer_size" if sized_by_algo else "replay.capacity"
        raise ConfigError(
            f"{key}={capacity} is invalid: a replay of {capacity} transitions of "
            f"{cfg.env.id} needs {needed:,} bytes ({needed / 2**30:.1f} GiB), but "
            f"{available:,} bytes ({available / 2**30:.1f} GiB) of memory are available: "
            f"lower {key} (at most about {capacity * available // needed} transitions fit)")


def _applied_plan(step_plan: StepPlan, platform: HostPlatform | ModeledPlatform) -> Plan:
    """The plan the precision policy follows: a modeled platform's as it is; on the host,
    the measured plan with each node in the dtype chosen for the device the learner really
    runs on (the host does not move layers between its devices)."""
    plan, costs = step_plan.plan, step_plan.costs
    if not step_plan.measured or costs.dtypes is None:
        return plan
    k = costs.devices.index(platform.device.type)
    return replace(plan, dtypes=[row[k] for row in costs.dtypes])


def _against_fp32(learner: Learner, precision: Precision, step_plan: StepPlan,
                  platform: HostPlatform, spaces: dict[str, gym.Space]) -> Plan:
    """Time whole updates of copies of the learner in this precision and in float32, in
    turns (`StepPlan.update_s`, logged as `host/speedup_vs_fp32`). A per-layer plan (mixed)
    is timed beside every layer in each 16-bit dtype the device has instructions for, and
    the fastest of them and float32 is applied: the per-layer choice is made from each
    layer's passes timed alone, and what it leaves out (a cast at each dtype boundary, a
    region per layer) can make it slower than one dtype throughout. Returns the plan to
    apply."""
    device, applied = platform.device, step_plan.applied
    if applied.dtypes is not None and len(precision.host_dtypes) > 1:  # per layer: mixed
        throughout = {dtype: replace(applied, dtypes=uniform_dtypes(step_plan.graph, dtype))
                      for dtype in precision.host_dtypes
                      if not emulates(device.type, getattr(torch, dtype))}
        plans = {dtype: plan for dtype, plan in throughout.items() if dtype != "float32"}
        # a per-layer plan in one dtype throughout is that candidate: timed once, so that
        # noise cannot pick one of the two and call the same computation faster
        if all(plan.dtypes != applied.dtypes for plan in throughout.values()):
            plans = {"per layer": applied} | plans
        seconds = _timed_updates(learner, precision, step_plan, plans, platform, spaces)
        best = min(seconds, key=seconds.get)
        applied = (plans | throughout)[best]
        log.info("precision=mixed on %s: %s (an update %.2f ms; float32 %.2f ms; %s)",
                 _device_name(device),
                 best if best == "per layer" else f"every layer in {best}",
                 1e3 * seconds[best], 1e3 * seconds["float32"],
                 ", ".join(f"{name} {1e3 * s:.2f} ms" for name, s in seconds.items()))
        if best != "per layer":
            step_plan.plan.dtypes = list(applied.dtypes)
        step_plan.update_s = {"precision": seconds[best], "float32": seconds["float32"]}
        return applied
    step_plan.update_s = _timed_updates(learner, precision, step_plan, {"precision": applied},
                                        platform, spaces)
    return applied


def _warn_if_slower(learner: Learner, precision: Precision, step_plan: StepPlan,
                    device: torch.device) -> None:
    """Warn, with the measured slowdown, where one 16-bit dtype throughout computes an update
    slower than float32 on this host."""
    if step_plan.update_s is None or len(precision.host_dtypes) != 1:
        return
    slowdown = step_plan.update_s["precision"] / step_plan.update_s["float32"]
    if slowdown > 1.0:
        (dtype,) = precision.host_dtypes
        emulated = emulates(device.type, getattr(torch, dtype))
        log.warning(
            "%s computes an update of %s %.1fx slower than float32 on this host (measured "
            "%.1f ms vs %.1f ms; %s)%s: precision=fp32, or precision=mixed (float32 wherever "
            "it is faster), trains faster", dtype, type(learner).__name__, slowdown,
            1e3 * step_plan.update_s["precision"], 1e3 * step_plan.update_s["float32"],
            _device_name(device),
            f": the CPU has no {dtype} instructions, so its numerics are emulated by rounding "
            "in float32" if emulated else "")


def _device_name(device: torch.device) -> str:
    return cpu_name() if device.type == "cpu" else torch.cuda.get_device_name(device)


def _timed_updates(learner: Learner, precision: Precision, step_plan: StepPlan,
                   plans: dict[str, Plan], platform: HostPlatform,
                   spaces: dict[str, gym.Space]) -> dict[str, float]:
    """Seconds of one whole update of a copy of the learner under each of `plans` (the
    precision applied) and of one in float32 ("float32"), measured in turns (the median of
    20, after 5 that warm the allocator and the kernels' caches up)."""
    learners = {name: copy.deepcopy(learner) for name in [*plans, "float32"]}
    for name, plan in plans.items():
        precision.apply(learners[name], step_plan.graph, plan, platform)
    contexts = {name: precision.autocast(platform.device) for name in plans}
    return compare_updates(learners, contexts | {"float32": contextlib.nullcontext()}, **spaces,
                           device=platform.device, warmup=5, repeats=20)


def _plan(cfg: DictConfig, learner: Learner, platform: HostPlatform | ModeledPlatform,
          precision: Precision, spaces: dict[str, gym.Space]) -> StepPlan | None:
    """A modeled platform plans the step from modeled costs; the host from costs measured on
    its devices (unless `platform.measure_layers=false`), and in a precision other than
    float32 it times whole updates against float32's, or (`platform.reuse_plan`) takes the
    plan recorded for the same step on this machine (`hetrl.plan_record`); learners with no
    task graph (multi-agent) have no plan on the host."""
    key = None  # the host's record of this step's plan, where it is kept
    if isinstance(platform, ModeledPlatform):
        step_plan = plan_step(learner, platform, precision, instantiate(cfg.partitioner),
                              **spaces)
    elif platform.measure_layers and hasattr(learner, "task_graph"):
        if platform.reuse_plan:
            key = plan_key(learner, platform, {
                group: OmegaConf.to_container(cfg[group], resolve=True)
                for group in ("precision", "platform", "partitioner")})
            if (recorded := recorded_plan(key)) is not None:
                _warn_if_slower(learner, precision, recorded, platform.device)
                return recorded
        step_plan = plan_measured_step(learner, platform, instantiate(cfg.partitioner),
                                       **spaces, dtypes=precision.host_dtypes,
                                       min_speedup=getattr(precision, "min_speedup", 1.0))
    else:
        return None
    step_plan.applied = _applied_plan(step_plan, platform)
    if step_plan.measured and precision.host_dtypes != ("float32",):
        step_plan.applied = _against_fp32(learner, precision, step_plan, platform, spaces)
        _warn_if_slower(learner, precision, step_plan, platform.device)
    if key is not None:
        record_plan(key, step_plan)
    return step_plan
