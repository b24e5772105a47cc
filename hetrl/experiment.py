"""One job: build the components a config names, train, and track it from start to end."""

from __future__ import annotations

import logging
import signal
import threading
import traceback
from contextlib import closing, contextmanager, nullcontext
from functools import partial
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from hetrl import checkpoint
from hetrl.build import Components, Parts, build, preflight
from hetrl.checks import check_inputs
from hetrl.config.errors import ConfigError, require, unwrapped
from hetrl.envs.state import env_state, load_env_state
from hetrl.evaluation import Evaluator, ptq_reward_error
from hetrl.faults import Fault, Stopped, StopRequest, StoreLost, WorkerLost
from hetrl.options import GROUPS, group_options, typed_config
from hetrl.policy_outputs import leave_policy
from hetrl.progress import Span, TrainingProgress
from hetrl.scheduler.base import Loop
from hetrl.scheduler.context import Training
from hetrl.scheduler.state import LoopState, Report
from hetrl.seeding import rng_states, set_rng_states
from hetrl.stopping import SIGNALS, adopt
from hetrl.tracking.base import REFERENCE_TAG, Tracker
from hetrl.tracking.artifacts import log_go_game, log_learning_curve, log_plan
from hetrl.tracking.reward_error import (fp32_actors_key, learned, numerics_key,
                                         reference_metrics, twin_to_train)
from hetrl.validation import validate

log = logging.getLogger("hetrl")


RESUME_OVERRIDES = ("steps", "log_every", "checkpoint_every", "tracking.uri", "compile")
"""What a resumed job takes from the command line: a longer budget, its logging and
checkpoint rhythm, a store that moved, its update compiled or not. Anything else would change what is learned."""


def run(cfg: DictConfig, choices: Mapping[str, str], out_dir: Path,
        overrides: Sequence[str] = (), tags: Mapping[str, str] | None = None,
        span: Span | None = None) -> dict[str, Any]:
    """Train one job; returns its final metrics and MLflow run id.

    `choices` names the chosen option of each config group (Hydra's runtime choices);
    `out_dir` receives the checkpoint. With `resume=<job dir>`, the config, choices and
    MLflow run of that job are taken from its checkpoint and the job goes on there; of the
    command line's `overrides` (Hydra's task overrides) those of RESUME_OVERRIDES apply and
    any other that changes the job is refused. `tags` go on the run beside the choices (a
    sweep's job number; `REFERENCE_TAG` on a job's reference run). `span`: the steps its
    progress bar covers, a reference run's shared with its job's (by default its own, and
    its reference run's if it will train one).
    """
    saved = None
    if cfg.resume:
        out_dir = Path(cfg.resume)
        saved = checkpoint.load(out_dir)
        cfg, choices = _resumed_config(saved, cfg, choices, overrides), saved["choices"]
    # the tuned file (conf/tuned/<algo>_<env>.yaml) the job took its hyperparameters from;
    # Hydra names the optional file whether or not it exists
    tuned = choices.get("tuned")
    choices = {**{group: choices[group] for group in GROUPS},
               "tuned": tuned if tuned in group_options("tuned") else "none"}
    name = "-".join(choices[g] for g in ("algo", "env", "platform", "precision")) + f"-s{cfg.seed}"
    check_inputs(cfg, choices)  # before anything is created: a rejected job leaves no run, no store
    validate(cfg, choices)
    # likewise for what only the platform and the envs show; build() goes on from them
    parts = preflight(cfg)
    with (closing(parts) if parts else nullcontext(),
          _stop_on_signals() as stop):  # before the run opens: a signal never strands it
        if stop.is_set():  # sent while this process waited between two jobs of a sweep
            raise Stopped(stop.signum)
        tracker = _tracker(cfg)
        tracker.start(name, tags={**choices, "seed": str(cfg.seed), **(tags or {})},
                      run_id=saved["run_id"] if saved else None)
        twin = twin_to_train(cfg, choices, tracker)
        span = span or Span(cfg.steps * (2 if twin else 1))
        log.info("%s", _start_line(cfg, name, out_dir, tracker, saved, _twin_note(cfg, twin)))
        try:
            if saved is None:
                tracker.log_params(researcher_params(cfg))
            tracker.set_tags({"numerics_key": numerics_key(cfg),
                              "fp32_actors_key": fp32_actors_key(cfg),
                              "actors_precision": cfg.actors.precision})
            results, state = _train(cfg, choices, out_dir, tracker, saved, stop, name, span,
                                    parts)
            train_twin = partial(run, tags=_reference_tags(tracker), span=span)
            results.update(reference_metrics(cfg, choices, results, state.history,
                                             state.history_s, out_dir, tracker, train_twin))
            log_learning_curve(tracker, state.history, cfg.algo.get("learning_starts"),
                               results, out_dir, name)
        except KeyboardInterrupt as interrupt:
            if isinstance(interrupt, Stopped) and interrupt.job_dir is None:
                interrupt.job_dir = str(out_dir)  # where `resume=` goes on
            tracker.end("KILLED")
            raise
        except BaseException:
            tracker.log_text(traceback.format_exc(), "error.txt")
            tracker.end("FAILED")
            raise
        tracker.end("FINISHED")
    log.info("%s", _end_summary(name, results, out_dir, tracker))
    return {**results, "run_id": tracker.run_id}


def _reference_tags(tracker: Tracker) -> dict[str, str]:
    """The tags of a reference run this job trains: the job's run id (none untracked)."""
    return {REFERENCE_TAG: tracker.run_id} if tracker.run_id else {}


SUMMARY = ("return_mean_100", "eval/final_return_mean", "eval/return_mean",
           "eval/best_return_mean", "reward_error_pct", "ptq_reward_error_pct", "time_to_95pct_s",
           "stop_return/step", "sps", "eps_host", "eps_platform", "updates")
"""The final metrics the end summary names (those the run has)."""


def _start_line(cfg: DictConfig, name: str, out_dir: Path, tracker: Tracker,
                saved: dict[str, Any] | None, then: str = "") -> str:
    """What the job is (`then`: what it trains after itself), where it writes and where to
    watch it: printed before anything else."""
    budget = f"{cfg.steps:,} env steps"
    if cfg.stop_return is not None:
        budget += f" or until return_mean_100 >= {cfg.stop_return:g}"
    if saved is not None:
        budget += f", resuming at step {saved['loop'].step:,}"
    if (starts := cfg.algo.get("learning_starts")) is not None:
        budget += f", learning_starts {starts:,}"
    budget += then
    where = getattr(tracker, "where", lambda: None)()
    return f"{name}: {budget} → {_short(out_dir)}" + (f" | {where}" if where else "")


def _twin_note(cfg: DictConfig, twin: bool) -> str:
    """The start line's word on the reference run the job trains when it ends, if it will
    (`twin`)."""
    if not twin:
        return ""
    return (f", then its reference run (precision=fp32, for reward_error_pct): another "
            f"{cfg.steps:,} env steps, reference=find skips it")


def _short(path: Path) -> Path:
    """`path` relative to the working directory when it is under it."""
    try:
        return path.resolve().relative_to(Path.cwd())
    except ValueError:
        return path


def _end_summary(name: str, results: Mapping[str, Any], out_dir: Path, tracker: Tracker) -> str:
    """The final metrics, the checkpoint and where the run is."""
    figures = ", ".join(_figure(key, results) for key in SUMMARY if key in results)
    where = getattr(tracker, "where", lambda: None)()
    return (f"{name} finished: {figures or 'no metrics'} | checkpoint "
            f"{_short(out_dir / checkpoint.FILENAME)}" + (f" | {where}" if where else ""))


def _figure(key: str, results: Mapping[str, Any]) -> str:
    """One figure of the end summary; the final greedy evaluation with its 95 % interval."""
    if key == "eval/final_return_mean":
        return (f"greedy {key} {results[key]:.4g} ± {results['eval/final_return_ci95']:.2g} "
                f"({results['eval/final_episodes']:.0f} episodes)")
    return f"{key} {results[key]:.4g}"


def _tracker(cfg: DictConfig) -> Tracker:
    """The job's tracker; a store it cannot write is the Fault itself, not Hydra's wrapper."""
    with unwrapped(Fault):
        return instantiate(cfg.tracking)


def _resumed_config(saved: dict[str, Any], composed: DictConfig, choices: Mapping[str, str],
                    overrides: Sequence[str]) -> DictConfig:
    """The checkpoint's config with the command line's RESUME_OVERRIDES applied (taken from
    the composed config); any other override that changes the job is a ConfigError."""
    cfg = typed_config(saved["config"], saved["choices"])
    applied, refused = [], []
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key == "resume":
            continue
        if key in RESUME_OVERRIDES:
            OmegaConf.update(cfg, key, OmegaConf.select(composed, key), merge=False)
            applied.append(override)
        elif key in saved["choices"]:  # a config group: algo=..., env=...
            if choices.get(key) != saved["choices"][key]:
                refused.append(override)
        elif OmegaConf.select(composed, key, default=None) != OmegaConf.select(cfg, key,
                                                                              default=None):
            refused.append(override)
    if refused:
        raise ConfigError(
            f"resume={composed.resume} goes on with the job as it was configured: "
            f"{' '.join(refused)} would change what it learns; on resume only "
            f"{', '.join(RESUME_OVERRIDES)} may be set (start a new job for the others)"
        )
    at = saved["loop"].step
    if any(o.split("=", 1)[0].lstrip("+~") == "steps" for o in applied):  # a new budget
        require(cfg.steps >= at, "steps", cfg.steps,
                f"integers >= {at} on resume (the checkpoint is at step {at})")
    if applied:
        log.info("resume=%s with %s", composed.resume, " ".join(applied))
    return cfg


def _train(
    cfg: DictConfig,
    choices: Mapping[str, str],
    out_dir: Path,
    tracker: Tracker,
    saved: dict[str, Any] | None,
    stop: threading.Event,
    name: str,
    span: Span,
    parts: Parts | None,
) -> tuple[dict[str, float], LoopState]:
    """Build the job (from the `parts` made before its run opened, if any), log what it is,
    run its loop from the start or the checkpoint (its bar within `span`), then evaluate and
    keep its artifacts."""
    c = build(cfg, planned=saved and saved.get("step_plan"), parts=parts)
    if saved is None:
        tracker.log_params({f"host.{k}": v for k, v in c.platform.describe().items()})
        tracker.log_text(OmegaConf.to_yaml(cfg.platform, resolve=True), "platform.yaml")
        if c.step_plan is not None:
            log_plan(tracker, c.step_plan, c.precision, c.platform, c.learner.batch_size,
                     out_dir, name)
    for choice in (c.update_choice, c.acting_choice):
        if choice is not None:
            tracker.log_metrics(choice.metrics(), step=0)
    state = _initial_state(c, saved, cfg.seed)
    save_checkpoint = partial(_save_checkpoint, out_dir / checkpoint.FILENAME, cfg, choices,
                              tracker, c)
    progress = TrainingProgress(cfg.steps, state.step, name, counter=lambda: state.step,
                                span=span)

    def report(step: int, metrics: dict[str, float], kind: Report) -> None:
        try:
            tracker.log_metrics(metrics, step)
        except StoreLost as lost:  # the job stops with a checkpoint: it goes on from there
            path = save_checkpoint(state)
            raise StoreLost(f"{lost}; the job stopped at step {step}, its checkpoint: "
                            f"{_short(path)}") from None
        progress.update(step, metrics, kind)

    evaluate = (Evaluator(c.learner, partial(c.make_envs, n_envs=1), cfg.eval.episodes,
                          cfg.seed) if cfg.eval.every > 0 else None)
    training = Training(
        envs=c.envs, learner=c.learner, replay=c.replay, precision=c.precision,
        steps=cfg.steps, log_every=cfg.log_every, checkpoint_every=cfg.checkpoint_every,
        report=report, checkpoint=save_checkpoint, stop=stop, actors=c.actors,
        workers=c.workers,
        make_envs=c.make_envs, seed=cfg.seed, log_text=tracker.log_text,
        log_game=partial(log_go_game, tracker),
        evaluate=evaluate, eval_every=cfg.eval.every, stop_return=cfg.stop_return,
    )
    results = None
    try:
        results = _run_loop(c.scheduler, training, state)
        if evaluate is not None and state.eval_best is not None:
            step, _, weights = state.eval_best
            best = evaluate.best(step, weights)
            tracker.log_metrics(best, step=state.step)
            results.update(best)
    finally:  # a run that never learned trains no twin: its bar ends the span
        progress.close(last=results is not None and not learned(results))
        c.envs.close()
        if evaluate is not None:
            evaluate.close()
    if state.eval_history:  # the final evaluation: what the reward error stands on
        results["eval/return_mean"] = state.eval_history[-1][1]
    if c.actors.spec.quantized:
        ptq = ptq_reward_error(c.learner, c.actors.spec, partial(c.make_envs, n_envs=1),
                               c.actors.eval_episodes, cfg.seed)
        tracker.log_metrics(ptq, step=state.step)
        results.update(ptq)
    tracker.log_text(OmegaConf.to_yaml(cfg, resolve=True), "config.yaml")
    tracker.log_artifact(save_checkpoint(state))
    results.update(leave_policy(cfg, choices, out_dir, tracker, c, state.step, state.eval_best))
    if c.step_plan is not None:
        results.update(c.step_plan.metrics(c.learner.batch_size))
    return results, state


SIGNALLED_GRACE_S = 1.0
"""How long a lost worker waits for the job's own stop: a signal sent to every process of
the group (a launcher forwarding SIGTERM to each) can end a worker a moment before the job
notes its own."""


def _run_loop(loop: Loop, t: Training, state: LoopState) -> dict[str, float]:
    """The loop. A worker or actor lost while the job is stopping, or within
    SIGNALLED_GRACE_S of it, is the stop's doing: the job stops with a checkpoint, as on
    any stop, and does not fail."""
    try:
        return loop.run(t, state)
    except WorkerLost:
        if not t.stop.wait(SIGNALLED_GRACE_S):
            raise
        t.stop_if_requested(state)  # checkpoints, then raises Stopped
        raise


def _initial_state(c: Components, saved: dict[str, Any] | None, seed: int) -> LoopState:
    """A fresh loop on freshly reset envs, or the checkpointed one with every component and
    random generator as it was."""
    state = LoopState()
    if saved is None:
        state.obs, _ = c.envs.reset(seed=seed)
        c.envs.action_space.seed(seed)
        return state
    c.learner.restore(saved["learner"])
    c.replay.load_state_dict(saved["replay"])
    state.__dict__.update(vars(saved["loop"]))
    if saved["envs"] is not None:
        load_env_state(c.envs, saved["envs"])
    else:
        log.warning("this env's state cannot be saved: resumed episodes start afresh")
        state.obs, _ = c.envs.reset(seed=seed + state.step)
    set_rng_states(saved["rng"])
    return state


def _save_checkpoint(path: Path, cfg: DictConfig, choices: Mapping[str, str],
                     tracker: Tracker, c: Components, loop: LoopState) -> Path:
    checkpoint.save(path, {
        "config": OmegaConf.to_container(cfg), "choices": dict(choices),
        "run_id": tracker.run_id, "learner": c.learner.checkpoint(),
        "replay": c.replay.state_dict(), "envs": env_state(c.envs), "loop": loop,
        "rng": rng_states(), "step_plan": c.step_plan,
    })
    return path


@contextmanager
def _stop_on_signals() -> Iterator[StopRequest]:
    """SIGINT/SIGTERM ask the loop to stop at the next step (after a checkpoint): the handler
    only notes the signal (StopRequest.request), the loop and its waits read it. A process
    that runs a sweep's jobs blocks them between jobs (hetrl.sweep.stops); they are unblocked
    here, so one sent meanwhile arrives now and the job stops before it begins."""
    stop = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    previous = {s: signal.signal(s, stop.request) for s in SIGNALS}
    stop.signals.extend(adopt(previous[signal.SIGINT]))  # noted while the job was made ready
    masks = hasattr(signal, "pthread_sigmask")  # POSIX
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS) if masks else None

    def restore() -> None:
        if masks:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    try:
        yield stop
    except BaseException:
        restore()
        raise
    restore()
    if stop.is_set() and callable(handler := previous[stop.signum]):
        handler(stop.signum, None)  # the job finished first: the sweep's stop goes on


PLATFORM_TABLES = ("devices", "links", "baselines")
"""A modeled platform's device, link and baseline tables: the platform.yaml artifact, not
params (they would bury the few keys a researcher varies)."""


def researcher_params(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config as params, less the platform's tables and the top-level nodes
    that are unset (`selfplay: null`) or only point at another (`scheduler: ${selfplay}`)."""
    tree = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    for key in list(tree):
        if tree[key] is None or OmegaConf.is_interpolation(cfg, key):
            del tree[key]
    for key in PLATFORM_TABLES:
        tree.get("platform", {}).pop(key, None)
    return _flatten(tree)


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """{"algo": {"lr": 1}} -> {"algo.lr": 1}; lists stay whole values."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat
