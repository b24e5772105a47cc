"""The learner's side of an actor pool (ActorQ, PEARL): it hands an actor its next chunk of
env steps and the newest weights that actor lacks.

The weights go as a published message (`hetrl.actors.weights.publish`: a serialized state
dict, quantized for q_c), sent only to an actor that does not hold that version yet; or, with
a `DoubleBuffer` (PEARL's process actors), written into the shared buffer, which each actor is
handed once and reads new versions from itself (a tag read, no message). A new version is
published at most every `sync_every` learner updates (ActorQ: 1, at every change)."""

from __future__ import annotations

from time import perf_counter

from hetrl.actors.pool import ActorPool
from hetrl.actors.shared import DoubleBuffer, flatten
from hetrl.actors.weights import publish
from hetrl.algos.base import Learner


class Dispatcher:
    """Chunks of `chunk_steps` vector-env steps of `n_envs` envs, up to a budget of `steps`
    env steps of which `requested` are asked already; publishing is timed into
    `phase_s["publish"]`."""

    def __init__(self, pool: ActorPool, learner: Learner, chunk_steps: int, n_envs: int,
                 steps: int, requested: int, phase_s: dict[str, float], sync_every: int = 1,
                 shared: DoubleBuffer | None = None) -> None:
        self.pool, self.learner = pool, learner
        self.chunk_steps, self.n_envs, self.steps = chunk_steps, n_envs, steps
        self.requested = requested  # env steps asked of the actors so far
        self.phase_s, self.sync_every, self.shared = phase_s, sync_every, shared
        self.version = -1  # the learner's update count at the last publication
        self.published = 0  # versions written into the shared buffer
        self.payload = b""  # the last published message
        self.pulled: dict[int, int] = {}  # rank -> the version it holds
        self.handed: set[int] = set()  # ranks handed the shared buffer

    def send(self, rank: int) -> bool:
        """Ask actor `rank` for its next chunk, with the newest weights it lacks; False (and
        nothing asked) once the whole budget is asked for."""
        steps = min(self.chunk_steps, -(-(self.steps - self.requested) // self.n_envs))
        if steps <= 0:
            return False
        if self._due():
            self._publish()
        if self.shared is not None:
            weights = self.shared if rank not in self.handed else None
            self.handed.add(rank)
        else:
            weights = self.payload if self.pulled.get(rank) != self.version else None
        self.pool.submit(rank, weights, steps, self.requested)
        self.pulled[rank] = self.version
        self.requested += steps * self.n_envs
        return True

    def _due(self) -> bool:
        """Whether a new version is due: none yet, or `sync_every` updates have passed."""
        updates, every = self.learner.updates, self.sync_every
        return self.version < 0 or updates // every > self.version // every

    def _publish(self) -> None:
        start = perf_counter()
        policy = self.learner.policy()
        if self.shared is not None:
            self.shared.write(self.published, flatten(policy))
            self.published += 1
        else:
            self.payload = publish(policy, self.pool.spec, self.pool.quantize_on)
        self.version = self.learner.updates
        self.phase_s["publish"] = self.phase_s.get("publish", 0.0) + perf_counter() - start
