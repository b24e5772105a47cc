"""What a loop does between its steps: the metrics it reports (DESIGN.md's), and after each
step the wall time, a stop request honoured, the logs, evaluations and checkpoints
(`StepBoundary`), and a loss that stays non-finite failing the run."""

from __future__ import annotations

import copy
import json
import math
from time import perf_counter

import numpy as np

from hetrl.algos.base import Learner
from hetrl.scheduler.context import Training
from hetrl.scheduler.state import LoopState, Report


class NonFiniteLoss(RuntimeError):
    """The learner's loss stayed NaN or infinite: the run learns nothing more and fails."""


NON_FINITE_LIMIT = 100
"""Updates in a row whose loss may be NaN or infinite before the run fails (a float16 step
that overflows now and then is skipped by the loss scaler and is not a failure)."""


TRAINING_PHASES = ("replay_add", "rollout_add", "advantages", "sample", "pearl_insert",
                   "update", "priority_update")
"""PEARL's training iteration: what eps_host divides by (on-policy: store, GAE, minibatch,
update)."""


def loop_metrics(state: LoopState, learner: Learner, learner_metrics: dict) -> dict[str, float]:
    """The metrics of DESIGN.md at this point of the loop."""
    wall = max(state.elapsed_s, 1e-9)
    train_s = sum(state.phase_s.get(name, 0.0) for name in TRAINING_PHASES)
    metrics = {
        "sps": state.step / wall,
        "episodes": float(state.episodes),
        "updates": float(state.updates),
        "precision/skipped_steps": float(learner.skipped_steps),
    }
    if state.updates > 0 and train_s > 0:  # no throughput with no update behind it
        metrics["eps_host"] = learner.batch_size * state.updates / train_s
    if (mean := state.return_mean_100()) is not None:
        metrics["return_mean_100"] = mean
    if state.reached is not None:  # the job's stop_return, as SB3's time-to-threshold
        metrics["stop_return/step"], metrics["stop_return/elapsed_s"] = state.reached
    for name, seconds in state.phase_s.items():
        metrics[f"phase/{name}_s"] = seconds
        metrics[f"phase/{name}_pct"] = 100.0 * seconds / wall
    metrics.update({f"learner/{k}": float(v) for k, v in learner_metrics.items()})
    metrics.update(actor_metrics(state.actors))
    return metrics


def actor_metrics(actors: dict[int, dict[str, float]]) -> dict[str, float]:
    """Each actor's totals as `actor/<rank>/<name>` and their mean over the actors as
    `actor/<name>` (ActorQ's runtime breakdown, QuaRL A.1.7)."""
    metrics: dict[str, float] = {}
    for rank, totals in sorted(actors.items()):
        metrics.update({f"actor/{rank}/{name}": value for name, value in totals.items()})
    for name in sorted({name for totals in actors.values() for name in totals}):
        metrics[f"actor/{name}"] = float(np.mean([t.get(name, 0.0) for t in actors.values()]))
    return metrics


def report_placement(t: Training, step: int, placement: dict[int, str]) -> None:
    """Where an actor pool's actors run (rank -> node): the number of nodes as `actors/nodes`
    and the map as `actors/placement.json`."""
    t.report(step, {"actors/nodes": float(len(set(placement.values())))}, Report.event)
    if t.log_text is not None:
        t.log_text(json.dumps({str(rank): node for rank, node in placement.items()}, indent=1),
                   "actors/placement.json")


def _crossed(step: int, n: int, every: int) -> bool:
    """Whether the last n steps, ending at `step`, crossed a multiple of `every`."""
    return every > 0 and step // every > (step - n) // every


class StepBoundary:
    """What a loop does after each of its steps: keep the wall time, honour a stop request
    (checkpoint, then raise Stopped), log every `log_every` env steps and at the end (the
    budget's, or the first log whose return_mean_100 reaches `stop_return`), and checkpoint
    every `checkpoint_every` env steps."""

    def __init__(self, t: Training, state: LoopState) -> None:
        self.t, self.state = t, state
        self._tick = perf_counter()
        self._updates = state.updates  # the updates whose losses were checked
        self._non_finite_since: tuple[int, int] | None = None  # (step, updates) it started

    def __call__(self, n: int, obs: np.ndarray, learner_metrics: dict) -> None:
        """After a step of `n` env steps that ended at observations `obs`."""
        t, state = self.t, self.state
        if state.updates != self._updates:
            self._check_losses(learner_metrics)
        finished = t.done(state)
        log_due = _crossed(state.step, n, t.log_every) or finished
        checkpoint_due = _crossed(state.step, n, t.checkpoint_every)
        if log_due or t.stop.is_set() or checkpoint_due:
            now = perf_counter()
            state.elapsed_s += now - self._tick
            self._tick = now
            state.obs = obs
        t.stop_if_requested(state)
        if log_due:
            mean = state.return_mean_100()
            if (state.reached is None and t.stop_return is not None and mean is not None
                    and mean >= t.stop_return):
                state.reached = (state.step, state.elapsed_s)
                finished = True
            metrics = loop_metrics(state, t.learner, learner_metrics)
            if mean is not None:
                state.history.append((state.step, mean))
                state.history_s.append(state.elapsed_s)
            t.report(state.step, metrics, Report.loop)
        if t.evaluate is not None and (_crossed(state.step, n, t.eval_every) or finished):
            start = perf_counter()
            metrics = t.evaluate()
            score = metrics["eval/return_mean"]
            state.eval_history.append((state.step, score))
            if state.eval_best is None or score > state.eval_best[1]:
                state.eval_best = (state.step, score, copy.deepcopy(t.learner.state_dict()))
            t.report(state.step, metrics, Report.evaluation)
            self._tick += perf_counter() - start  # evaluating is no part of the loop's time
        if checkpoint_due and not finished:
            t.checkpoint(state)

    def _check_losses(self, learner_metrics: dict) -> None:
        """Fail the run once the losses of the updates since the last step were non-finite
        for NON_FINITE_LIMIT updates in a row, naming the step where that began."""
        state = self.state
        self._updates = state.updates
        bad = {key: float(value) for key, value in learner_metrics.items()
               if "loss" in key and not math.isfinite(float(value))}
        if not bad:
            self._non_finite_since = None
            return
        if self._non_finite_since is None:
            self._non_finite_since = (state.step, state.updates)
        step, updates = self._non_finite_since
        if state.updates - updates + 1 >= NON_FINITE_LIMIT:
            named = ", ".join(f"learner/{key}={value}" for key, value in sorted(bad.items()))
            raise NonFiniteLoss(
                f"the loss has been non-finite since step {step} (update {updates}), "
                f"{state.updates - updates + 1} updates in a row, now at step {state.step}: "
                f"{named}; the learner diverged (lower algo.lr, or check the rewards and the "
                "precision)")
