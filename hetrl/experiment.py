"""One job: build the components a config names, train, and track it from start to end."""

from __future__ import annotations

import logging
import signal
import threading
import traceback
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Iterator, Mapping

import gymnasium as gym
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from hetrl import checkpoint
from hetrl.algos.base import Learner
from hetrl.envs.state import env_state, load_env_state
from hetrl.evaluation import ptq_reward_error
from hetrl.options import GROUPS
from hetrl.partition.planning import StepPlan, plan_measured_step, plan_step
from hetrl.platform.model import ModeledPlatform
from hetrl.progress import TrainingProgress
from hetrl.replay.uniform import UniformReplay
from hetrl.scheduler.context import Training
from hetrl.scheduler.state import LoopState
from hetrl.seeding import rng_states, seed_everything, set_rng_states
from hetrl.tracking.base import Tracker
from hetrl.tracking.plots import gantt, learning_curve
from hetrl.tracking.reward_error import (fp32_actors_key, numerics_key, reference_job,
                                         reward_error_pct, time_to_reach)
from hetrl.validation import validate

log = logging.getLogger("hetrl")


def run(cfg: DictConfig, choices: Mapping[str, str], out_dir: Path) -> dict[str, Any]:
    """Train one job; returns its final metrics and MLflow run id.

    `choices` names the chosen option of each config group (Hydra's runtime choices);
    `out_dir` receives the checkpoint. With `resume=<job dir>`, the config, choices and
    MLflow run of that job are taken from its checkpoint and the job goes on there.
    """
    saved = None
    if cfg.resume:
        out_dir = Path(cfg.resume)
        saved = checkpoint.load(out_dir)
        cfg, choices = OmegaConf.create(saved["config"]), saved["choices"]
    choices = {group: choices[group] for group in GROUPS}
    name = "-".join(choices[g] for g in ("algo", "env", "platform", "precision")) + f"-s{cfg.seed}"

    tracker: Tracker = instantiate(cfg.tracking)
    tracker.start(name, tags={**choices, "seed": str(cfg.seed)},
                  run_id=saved["run_id"] if saved else None)
    try:
        with _stop_on_signals() as stop:
            if saved is None:
                tracker.log_params(_flatten(OmegaConf.to_container(cfg, resolve=True,
                                                                    enum_to_str=True)))
            validate(cfg, choices)
            tracker.set_tags({"numerics_key": numerics_key(cfg),
                              "fp32_actors_key": fp32_actors_key(cfg),
                              "actors_precision": cfg.actors.precision})
            results, state = _train(cfg, choices, out_dir, tracker, saved, stop, name)
            reference = reference_job(cfg, choices)
            if reference is not None and "return_mean_100" in results:
                results["reward_error_pct"] = _reward_error(*reference, cfg.steps, out_dir,
                                                            tracker, results["return_mean_100"])
            if getattr(get_class(cfg.scheduler._target_), "actor_pool", False) and state.history:
                results.update(_time_to_95pct(cfg, choices, out_dir, tracker, state))
    except KeyboardInterrupt:
        tracker.end("KILLED")
        raise
    except BaseException:
        tracker.log_text(traceback.format_exc(), "error.txt")
        tracker.end("FAILED")
        raise
    tracker.end("FINISHED")
    return {**results, "run_id": tracker.run_id}


def _reward_error(reference_cfg: DictConfig, reference_choices: Mapping[str, str], step: int,
                  out_dir: Path, tracker: Tracker, value: float) -> float:
    """Against the reference run (`reference_job`: fp32, the replay's own sampler)."""
    tags = {"numerics_key": numerics_key(reference_cfg),
            "precision": reference_choices["precision"]}
    reference = _twin_return(tracker, tags, reference_cfg, reference_choices,
                             out_dir / "reference")
    error = reward_error_pct(value, reference)
    tracker.log_metrics({"reward_error_pct": error, "reward_reference": reference}, step=step)
    return error


def _time_to_95pct(cfg: DictConfig, choices: Mapping[str, str], out_dir: Path,
                   tracker: Tracker, state: LoopState) -> dict[str, float]:
    """ActorQ's Table 4 metric: the loop's wall time until return_mean_100 first reached 95%
    of the final value of the run with fp32 actors (this run's own, if its actors are fp32)."""
    reference = state.history[-1][1]
    if cfg.actors.precision != "fp32":
        reference = _twin_return(
            tracker, {"fp32_actors_key": fp32_actors_key(cfg), "actors_precision": "fp32",
                      "precision": choices["precision"]},
            OmegaConf.merge(cfg, {"actors": {"precision": "fp32"}}), choices,
            out_dir / "fp32_actors_reference")
    metrics = {"reward_fp32_actors": reference}
    seconds = time_to_reach(state.history, state.history_s, reference, 0.95)
    if seconds is not None:
        metrics["time_to_95pct_s"] = seconds
    tracker.log_metrics(metrics, step=cfg.steps)
    return metrics


def _twin_return(tracker: Tracker, tags: Mapping[str, str], twin: DictConfig,
                      twin_choices: Mapping[str, str], twin_dir: Path) -> float:
    """The final return_mean_100 of the finished run with these tags, or of `twin`, trained
    now when there is none yet (a reference run: fp32, fp32 actors, uniform sampler)."""
    reference = tracker.find_metric(tags, "return_mean_100")
    if reference is None:
        log.info("no reference run %s yet: training it", dict(tags))
        twin_dir.mkdir(exist_ok=True)
        reference = run(twin, twin_choices, twin_dir)["return_mean_100"]
    return reference


def _train(
    cfg: DictConfig,
    choices: Mapping[str, str],
    out_dir: Path,
    tracker: Tracker,
    saved: dict[str, Any] | None,
    stop: threading.Event,
    name: str,
) -> tuple[dict[str, float], LoopState]:
    platform = instantiate(cfg.platform)
    if saved is None:
        tracker.log_params({f"host.{k}": v for k, v in platform.describe().items()})
    seed_everything(cfg.seed)
    envs = instantiate(cfg.env)
    spaces = {"obs_space": envs.single_observation_space, "act_space": envs.single_action_space}
    learner = instantiate(cfg.algo, **spaces, device=platform.device)
    precision = instantiate(cfg.precision)
    step_plan = modeled = None
    if isinstance(platform, ModeledPlatform):
        step_plan = modeled = plan_step(learner, platform, precision, instantiate(cfg.partitioner))
    elif platform.measure_layers and hasattr(learner, "task_graph"):  # MARL learners have none
        step_plan = plan_measured_step(learner, platform, instantiate(cfg.partitioner), **spaces)
    if step_plan is not None and saved is None:
        _log_plan(tracker, step_plan, learner.batch_size, out_dir, name)
    precision.apply(learner, modeled and modeled.graph, modeled and modeled.plan, platform)
    replay = instantiate(cfg.replay, **spaces, device=platform.device)
    actors = instantiate(cfg.actors)
    state = LoopState()
    if saved is None:
        state.obs, _ = envs.reset(seed=cfg.seed)
        envs.action_space.seed(cfg.seed)
    else:
        _restore(saved, envs, learner, replay, state, cfg.seed)

    def save_checkpoint(loop: LoopState) -> Path:
        path = out_dir / checkpoint.FILENAME
        checkpoint.save(path, {
            "config": OmegaConf.to_container(cfg), "choices": dict(choices),
            "run_id": tracker.run_id, "learner": learner.checkpoint(),
            "replay": replay.state_dict(), "envs": env_state(envs), "loop": loop,
            "rng": rng_states(),
        })
        return path

    progress = TrainingProgress(cfg.steps, state.step, name)

    def report(step: int, metrics: dict[str, float]) -> None:
        tracker.log_metrics(metrics, step)
        progress.update(step, metrics)

    training = Training(
        envs=envs, learner=learner, replay=replay, precision=precision,
        steps=cfg.steps, log_every=cfg.log_every, checkpoint_every=cfg.checkpoint_every,
        report=report, checkpoint=save_checkpoint, stop=stop, actors=actors,
        make_envs=partial(instantiate, OmegaConf.to_container(cfg.env, resolve=True)),
        seed=cfg.seed,
    )
    try:
        results = instantiate(cfg.scheduler).run(training, state)
    finally:
        progress.close()
        envs.close()
    if actors.spec.quantized:
        ptq = ptq_reward_error(learner, actors.spec, lambda: instantiate(cfg.env, n_envs=1),
                               actors.eval_episodes, cfg.seed)
        tracker.log_metrics(ptq, step=state.step)
        results.update(ptq)
    tracker.log_text(OmegaConf.to_yaml(cfg, resolve=True), "config.yaml")
    tracker.log_artifact(learning_curve(state.history, out_dir / "learning_curve.png", name))
    tracker.log_artifact(save_checkpoint(state))
    if step_plan is not None:
        results.update(step_plan.metrics(learner.batch_size))
    return results, state


def _log_plan(tracker: Tracker, step_plan: StepPlan, batch_size: int, out_dir: Path,
              name: str) -> None:
    """The plan: its figures as metrics, the plan (with each node's cost per device) as JSON,
    and, where there is more than one device, its schedule as a Gantt."""
    tracker.log_metrics(step_plan.metrics(batch_size), step=0)
    tracker.log_text(step_plan.to_json(), "plan.json")
    if len(step_plan.plan.devices) > 1:
        tracker.log_artifact(gantt(step_plan.plan, step_plan.graph, out_dir / "plan_gantt.png",
                                   name))


def _restore(
    saved: dict[str, Any],
    envs: gym.vector.VectorEnv,
    learner: Learner,
    replay: UniformReplay,
    state: LoopState,
    seed: int,
) -> None:
    learner.restore(saved["learner"])
    replay.load_state_dict(saved["replay"])
    state.__dict__.update(vars(saved["loop"]))
    if saved["envs"] is not None:
        load_env_state(envs, saved["envs"])
    else:
        log.warning("this env's state cannot be saved: resumed episodes start afresh")
        state.obs, _ = envs.reset(seed=seed + state.step)
    set_rng_states(saved["rng"])


@contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """SIGINT/SIGTERM ask the loop to stop at the next step (after a checkpoint);
    a second Ctrl-C interrupts at once."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def request_stop(signum: int, frame: object) -> None:
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        log.warning("signal %d: stopping at the next step", signum)
        stop.set()

    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """{"algo": {"lr": 1}} -> {"algo.lr": 1}; lists stay whole values."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat
