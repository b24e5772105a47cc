"""What a training loop is handed: built components and the job's callbacks."""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, TypeVar

import gymnasium as gym

from hetrl.actors.base import Actors, Workers
from hetrl.algos.base import Learner
from hetrl.faults import Stopped
from hetrl.precision.base import Precision
from hetrl.replay.base import Replay
from hetrl.scheduler.state import LoopState, Report

if TYPE_CHECKING:
    from hetrl.algos.go_games import GameRecord
    from hetrl.envs.go import GoGame

T = TypeVar("T")


@dataclass
class Training:
    """What a loop runs on: the built components, its budget and rhythm, and the job's
    callbacks. A loop takes the learner, replay, actors and workers as the kinds it drives
    through `learner_as`, `replay_as`, `actors_as` and `workers_as` (validation made them fit
    its needs)."""

    envs: gym.vector.VectorEnv
    learner: Learner  # an OffPolicyLearner or an OnPolicyLearner, as the loop's needs say
    replay: Replay  # unused by loops whose needs say they keep their own data
    precision: Precision
    steps: int
    log_every: int
    checkpoint_every: int  # 0: no periodic checkpoints
    report: Callable[[int, dict[str, float], Report], None]  # (step, metrics, kind)
    checkpoint: Callable[[LoopState], None]
    stop: threading.Event = field(default_factory=threading.Event)
    actors: Actors | None = None  # where acting happens and in which precision
    workers: Workers | None = None  # the loop's own, not started (`LoopNeeds.workers`)
    make_envs: Callable[[], gym.vector.VectorEnv] | None = None  # more envs like `envs`
    seed: int = 0
    log_text: Callable[[str, str], None] | None = None  # (text, artifact name): the tracker's
    # (record, game, generation, player): a self-play game logged as SGF and its final board
    log_game: Callable[[GameRecord, GoGame, int, int], None] | None = None
    evaluate: Callable[[], dict[str, float]] | None = None  # deterministic evaluation, if on
    eval_every: int = 0  # env steps between evaluations (and one at the end)
    stop_return: float | None = None  # the loop ends at the first log reaching this return

    def learner_as(self, kind: type[T]) -> T:
        """The learner, as the kind of learner the loop trains."""
        return _narrowed(self.learner, kind, "learner")

    def replay_as(self, kind: type[T]) -> T:
        """The replay, as the kind of replay the loop stores into."""
        return _narrowed(self.replay, kind, "replay")

    def actors_as(self, kind: type[T]) -> T:
        """The actors, as the kind of actors the loop drives (an actor pool)."""
        return _narrowed(self.actors, kind, "actors")

    def workers_as(self, kind: type[T]) -> T | None:
        """The loop's own workers, as the kind it drives; None where it has none."""
        return None if self.workers is None else _narrowed(self.workers, kind, "workers")

    def done(self, state: LoopState) -> bool:
        """Whether the loop has spent its env-step budget or reached `stop_return`."""
        return state.step >= self.steps or state.reached is not None

    def stop_if_requested(self, state: LoopState) -> None:
        """Where a stop was requested (Ctrl-C, SIGTERM): checkpoint `state`, then raise
        `Stopped` naming the signal and the step."""
        if self.stop.is_set():
            self.checkpoint(state)
            raise Stopped(getattr(self.stop, "signum", signal.SIGINT), state.step)


def _narrowed(value: object, kind: type[T], what: str) -> T:
    """`value` as a `kind`; a TypeError naming both where it is not one (a loop driven
    around validation, as a test or a benchmark may)."""
    if not isinstance(value, kind):
        raise TypeError(f"the {what} is a {type(value).__name__}, and this loop needs a "
                        f"{kind.__name__}")
    return value
