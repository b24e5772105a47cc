"""The sync loop keeps SB3's schedule whatever the number of envs, and times its phases; the
update step every replay loop calls hands a prioritized replay its new priorities; every loop
ends at the first log that reaches `stop_return`."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import NOT_MEASURED, metric_history, mlflow_runs, run_job

from hetrl.algos.base import Batch
from hetrl.precision.uniform import UniformPrecision
from hetrl.scheduler.boundary import NON_FINITE_LIMIT, NonFiniteLoss, StepBoundary, loop_metrics
from hetrl.scheduler.context import Training
from hetrl.scheduler.state import LoopState
from hetrl.scheduler.updates import Updates

STEPS = 600  # the schedule's arithmetic holds at any budget past learning_starts
SCHEDULE = ("algo=dqn", "env=cartpole", f"steps={STEPS}", "algo.learning_starts=200",
            "algo.train_freq=4", "algo.gradient_steps=2", "algo.hidden=[32]", "tracking=none",
            "eval.final=0")  # the loop's figures: no final greedy evaluation needed


@pytest.mark.parametrize("envs", ["env.n_envs=1", "env.n_envs=4",
                                  "env.n_envs=2 env.vectorization=async"])
def test_updates_follow_train_freq_and_gradient_steps(tmp_path, envs):
    result = run_job(tmp_path, *SCHEDULE, *envs.split())
    # a rollout of 4 env steps, then 2 updates, once more than 200 steps are stored
    assert result["updates"] == 2 * (STEPS - 200) / 4
    assert result["episodes"] > 0 and result["return_mean_100"] > 0


def test_phases_are_timed_and_eps_host_follows_its_definition(tmp_path):
    result = run_job(tmp_path, *SCHEDULE, "algo.batch_size=32")
    phases = {k.removeprefix("phase/").removesuffix("_s"): v
              for k, v in result.items() if k.startswith("phase/") and k.endswith("_s")}
    assert set(phases) == {"act", "env", "replay_add", "sample", "update"}
    training_s = phases["replay_add"] + phases["sample"] + phases["update"]
    assert result["eps_host"] == pytest.approx(32 * result["updates"] / training_s)
    assert 0 < sum(phases.values()) <= STEPS / result["sps"]  # inside the loop's wall time


def test_bf16_precision_trains_ddpg(tmp_path):
    """A small DDPG (the claim holds at any width); no fp32 reference run (reference=find:
    its reward error is not what this checks)."""
    result = run_job(tmp_path, "algo=ddpg", "precision=bf16", "steps=400",
                     "algo.learning_starts=100", "algo.batch_size=32", "algo.hidden=[64,64]",
                     "reference=find", "tracking=none")
    assert result["updates"] == 300 and result["learner/critic_loss"] >= 0


class _PrioritizedReplay:
    """Two weighted rows per batch; remembers the priorities it is handed."""

    def __init__(self) -> None:
        self.handed: list[tuple[list[int], list[float]]] = []

    def sample(self, n: int) -> Batch:
        rows = torch.zeros(n)
        return Batch(rows, rows, rows, rows, rows, indices=np.arange(n), weights=torch.ones(n))

    def update_priorities(self, indices: np.ndarray, td_errors: torch.Tensor) -> None:
        self.handed.append((indices.tolist(), td_errors.tolist()))


def test_the_update_step_follows_the_schedule_and_hands_back_priorities():
    learner = SimpleNamespace(
        device=torch.device("cpu"), batch_size=2, train_freq=4, gradient_steps=3,
        learning_starts=8,
        learn=lambda batch: {"loss": torch.tensor(1.0), "td_errors": torch.tensor([0.5, 2.0])})
    replay, state = _PrioritizedReplay(), LoopState()
    updates = Updates(learner, replay, UniformPrecision("float32", None), state)
    # 6 env steps: one train_freq of 4, but not past learning_starts (8); 2 steps carry over
    assert updates.owed(6) == 0 and state.pending == 2
    # 2 + 6 more: two train_freqs, past learning_starts: 3 updates each
    assert updates.owed(6) == 2 * 3 and (state.step, state.pending) == (12, 0)
    assert updates.owed(3) == 0 and updates.owed(1) == 3
    assert updates.step() == {"loss": torch.tensor(1.0)}  # td_errors went to the replay
    assert replay.handed == [([0, 1], [0.5, 2.0])] and state.updates == 1
    assert {"sample", "update", "priority_update"} <= set(state.phase_s)


def test_no_eps_host_before_the_first_update():
    state = LoopState(step=500, elapsed_s=1.0, phase_s={"replay_add": 0.5})
    learner = SimpleNamespace(batch_size=32, skipped_steps=0)
    assert "eps_host" not in loop_metrics(state, learner, {})
    state.updates, state.phase_s["update"] = 10, 0.5
    assert loop_metrics(state, learner, {})["eps_host"] == pytest.approx(32 * 10 / 1.0)


def _boundary(**training) -> tuple[StepBoundary, LoopState]:
    state = LoopState()
    t = Training(**{"envs": None, "learner": None, "replay": None, "precision": None,
                    "steps": 10**6, "log_every": 10**6, "checkpoint_every": 0,
                    "report": lambda *a: None, "checkpoint": lambda s: None, **training})
    return StepBoundary(t, state), state


def test_a_loss_that_stays_non_finite_stops_the_run_naming_the_step():
    boundary, state = _boundary()
    for step in range(1, 61):  # a loss that is NaN now and then is not a failure
        state.step, state.updates = step, step
        boundary(1, None, {"critic_loss": torch.tensor(float("nan") if step % 2 else 1.0)})
    with pytest.raises(NonFiniteLoss, match=r"non-finite since step 100 .*learner/loss=nan"):
        for step in range(100, 100 + NON_FINITE_LIMIT + 1):
            state.step, state.updates = step, step
            boundary(1, None, {"loss": torch.tensor(float("nan")), "q_mean": torch.tensor(1.0)})


def test_a_diverging_learner_fails_its_run(tmp_path):
    with pytest.raises(NonFiniteLoss, match="non-finite since step"):
        run_job(tmp_path, "algo=dqn", "steps=2000", "algo.learning_starts=100",
                "algo.train_freq=1", "algo.hidden=[16]", "algo.lr=1e30",
                "algo.max_grad_norm=1e30", "log_every=500", *NOT_MEASURED)
    assert [r.info.status for r in mlflow_runs(tmp_path)] == ["FAILED"]


def test_stop_return_ends_the_loop_at_the_first_log_that_reaches_it_and_evaluates_there():
    logged, evaluated = [], []
    boundary, state = _boundary(
        log_every=10, stop_return=50.0,
        report=lambda step, m, kind: logged.append((step, kind.value)),
        learner=SimpleNamespace(batch_size=1, skipped_steps=0, state_dict=dict),
        evaluate=lambda: evaluated.append(state.step) or {"eval/return_mean": 1.0},
        eval_every=10**6)
    while not boundary.t.done(state) and state.step < 100:
        state.step += 1  # an episode a step: 20 of return 10, then of return 100
        state.record_episodes(np.array([10.0 if state.step <= 20 else 100.0]))
        boundary(1, None, {})
    # return_mean_100 passes 50 at step 37 ((200 + 1700) / 37), seen at the log of step 40
    assert state.reached is not None and state.reached[0] == 40 == state.step
    assert logged == [(10, "loop"), (20, "loop"), (30, "loop"), (40, "loop"), (40, "evaluation")]
    assert evaluated == [40]
    assert loop_metrics(state, boundary.t.learner, {})["stop_return/step"] == 40


@pytest.mark.parametrize("loop", ["algo=dqn scheduler=sync", "algo=ppo",
                                  "algo=dqn scheduler=actorq", "algo=dqn scheduler=pearl"])
def test_every_loop_ends_at_the_first_log_that_reaches_stop_return(tmp_path, loop):
    """CartPole's random policy returns about 22: a stop_return of 15 is reached at one of
    the first logs, long before the budget."""
    result = run_job(tmp_path, *loop.split(), "env=cartpole", "steps=20000", "log_every=256",
                     "stop_return=15", "eval.every=100000", "eval.episodes=1", *NOT_MEASURED)
    curve = metric_history(tmp_path, result["run_id"], "return_mean_100")
    first = next(step for step, value in curve if value >= 15)
    assert result["stop_return/step"] == first == curve[-1][0] < 20000
    assert [step for step, _ in metric_history(tmp_path, result["run_id"],
                                               "eval/return_mean")] == [first]
