"""`build(cfg)`: the one place a job's components are made from its config.

`experiment.run`, the tests and the benchmarks all build through here, so a job is put
together the same way wherever it runs (as Sample Factory's serial and parallel runners
build the same components and differ only in where they run them).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

import gymnasium as gym
import psutil
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from hetrl.actors.base import Actors
from hetrl.algos.base import Learner
from hetrl.config.errors import ConfigError
from hetrl.partition.planning import StepPlan, plan_measured_step, plan_step
from hetrl.platform.host import HostPlatform
from hetrl.platform.model import ModeledPlatform
from hetrl.precision.base import Precision
from hetrl.replay.base import Replay
from hetrl.seeding import seed_everything


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
    scheduler: Any  # the `scheduler` option: the training loop
    make_envs: Callable[..., gym.vector.VectorEnv]  # more envs like `envs` (keyword overrides)

    @property
    def spaces(self) -> dict[str, gym.Space]:
        """One env's spaces, as the learner and replay constructors take them."""
        return {"obs_space": self.envs.single_observation_space,
                "act_space": self.envs.single_action_space}


def build(cfg: DictConfig, plan: bool = True) -> Components:
    """Instantiate every component the config names, in the order that makes runs
    reproducible (the seed is set before the first env and network are made), plan the
    learner's step on the platform (unless `plan` is false: a caller that needs only the
    parts) and apply the precision policy to the learner."""
    platform = instantiate(cfg.platform)
    seed_everything(cfg.seed)
    make_envs = partial(instantiate, OmegaConf.to_container(cfg.env, resolve=True))
    envs = make_envs()
    spaces = {"obs_space": envs.single_observation_space,
              "act_space": envs.single_action_space}
    check_replay_memory(cfg, **spaces)
    learner = instantiate(cfg.algo, **spaces, device=platform.device)
    precision = instantiate(cfg.precision)
    step_plan = _plan(cfg, learner, platform, precision, spaces) if plan else None
    modeled = step_plan if isinstance(platform, ModeledPlatform) else None
    precision.apply(learner, modeled and modeled.graph, modeled and modeled.plan, platform)
    return Components(
        envs=envs, learner=learner,
        replay=instantiate(cfg.replay, **spaces, device=platform.device),
        precision=precision, platform=platform, step_plan=step_plan,
        actors=instantiate(cfg.actors), scheduler=instantiate(cfg.scheduler),
        make_envs=make_envs,
    )


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


def _plan(cfg: DictConfig, learner: Learner, platform: HostPlatform | ModeledPlatform,
          precision: Precision, spaces: dict[str, gym.Space]) -> StepPlan | None:
    """A modeled platform plans the step from modeled costs; the host from costs measured on
    its devices (unless `platform.measure_layers=false`); learners with no task graph
    (multi-agent) have no plan on the host."""
    if isinstance(platform, ModeledPlatform):
        return plan_step(learner, platform, precision, instantiate(cfg.partitioner), **spaces)
    if platform.measure_layers and hasattr(learner, "task_graph"):
        return plan_measured_step(learner, platform, instantiate(cfg.partitioner), **spaces)
    return None
