"""What ActorQ's actor pools share: the actors' config and the interface the scheduler drives."""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Callable

import gymnasium as gym

from hetrl.actors.base import Acting, Actors
from hetrl.actors.weights import QuantizeOn
from hetrl.actors.worker_logs import look_in
from hetrl.actors.worker import Chunk
from hetrl.algos.base import Learner
from hetrl.faults import WorkerLost

WAIT_SLICE_S = 0.25  # a blocking wait looks at the stop request and the timeout this often


class ActorError(RuntimeError):
    """An actor failed; the message holds its traceback."""


class ActorLost(ActorError, WorkerLost):
    """An actor died or hangs: said in one line (who, how it ended, what to do)."""


class ActorPool(Actors):
    """`n` actors, each pulling new weights every `pull_every` of its env steps, quantized on
    the learner's side (q_c) or its own (q). Subclasses run them somewhere (processes, Ray).

    The scheduler calls `start`, then `submit` one chunk of steps per actor and collects the
    finished ones with `results` (whatever order they finish in), and `close` at the end,
    on errors and on interrupts (which leaves no actor running).
    """

    acting = Acting(pool=True)

    def __init__(self, precision: str, int8_mode: str, per_channel: bool, eval_episodes: int,
                 n: int, pull_every: int, quantize_on: str, timeout_s: float) -> None:
        super().__init__(precision, int8_mode, per_channel, eval_episodes)
        self.n, self.pull_every = n, pull_every
        self.quantize_on = QuantizeOn(quantize_on)
        self.timeout_s = timeout_s
        self.logs: list[Path | None] = []  # rank -> its log file (worker_logs), if any

    def start(self, learner: Learner, make_envs: Callable[[], gym.vector.VectorEnv],
              seed: int) -> None:
        """Start the actors, each with a CPU copy of `learner` and envs from `make_envs`."""
        raise NotImplementedError

    def placement(self) -> dict[int, str]:
        """Where each started actor runs: rank -> node (this host's name for local pools)."""
        return dict.fromkeys(range(self.n), socket.gethostname())

    def submit(self, rank: int, payload: bytes | None, steps: int, step: int) -> None:
        """Ask actor `rank` to pull `payload` (None: keep its weights), then take `steps`
        vector-env steps."""
        raise NotImplementedError

    def results(self, block: bool = True, stop: threading.Event | None = None) -> list[Chunk]:
        """The chunks finished since the last call (with `block`, waits until there is one,
        or until `stop` is set: then it may return none). Waits in slices of WAIT_SLICE_S;
        an actor that has not answered a chunk within `timeout_s` of its submission raises
        an ActorError naming it."""
        raise NotImplementedError

    def hung_error(self, rank: int, waited_s: float, detail: str = "") -> ActorError:
        return ActorLost(
            f"actor {rank}{detail} has not answered its chunk in {waited_s:.0f} s "
            f"(actors.timeout_s={self.timeout_s:g}): it hangs or was stopped; the run stops "
            "(raise actors.timeout_s if its chunks take that long)")

    def died_error(self, who: str, how: str, look: str | None = None) -> ActorLost:
        """Actor `who` (its rank and where it ran) was found dead, `how` it ended (with its
        last log line); `look`: where its last words are (by default, `look_in` its log)."""
        return ActorLost(
            f"actor {who} died, {how}: the run stops, its last checkpoint is where resume= "
            f"goes on ({look_in(self.logs) if look is None else look}SIGKILL is often the "
            "kernel's OOM killer: give fewer actors.n or more memory)")

    def close(self) -> None:
        raise NotImplementedError
