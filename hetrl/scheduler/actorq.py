"""ActorQ (QuaRL §5): a full-precision learner here, quantized actors elsewhere.

Each actor takes `pull_every` env steps with the policy message it pulled before them, then
hands its transitions back and pulls again. The learner answers a finished actor at once (it
looks for one between any two updates, so a pull need not wait for a whole chunk of training,
as with the paper's separate model queue; but not while another chunk waits to be learned:
that bounds how far actors run ahead, as the paper's rate limiter does) with the newest
message (published again only when the weights have changed; none when the actor holds them
already, an unchanged model costs no pull), then stores the transitions and runs the updates
they are owed by the schedule every replay loop shares (hetrl.scheduler.updates:
`train_freq`, `gradient_steps`, `learning_starts`, counted across actors). So with one actor
and `pull_every=1` it is the sync loop, one update behind; with more actors or longer pulls
the actors act on weights up to one chunk stale, as in the paper.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from hetrl.actors.dispatch import Dispatcher
from hetrl.actors.pool import ActorPool
from hetrl.actors.worker import Chunk
from hetrl.algos.base import OffPolicyLearner
from hetrl.replay.uniform import UniformReplay
from hetrl.scheduler.base import LoopNeeds
from hetrl.scheduler.boundary import StepBoundary, loop_metrics, report_placement
from hetrl.scheduler.context import Training
from hetrl.scheduler.state import LoopState
from hetrl.scheduler.updates import Updates
from hetrl.timing import PhaseTimer


class ActorQScheduler:
    """`rate_limiter=chunk`: updates follow the replay loops' schedule (`train_freq`,
    `gradient_steps`) and an actor's pull waits while a chunk waits to be learned.
    `rate_limiter=samples_per_insert` (the paper's, Reverb's SampleToInsertRatio): the learner
    makes updates until it has sampled `samples_per_insert` transitions per transition
    inserted past `learning_starts` (batch_size per update; `train_freq` and `gradient_steps`
    are not used), and an actor's pull waits while the learner is more than `error_buffer`
    samples short of that (counting the chunks handed back and not learned yet)."""

    needs = LoopNeeds(actor_pool=True)  # the actors step single-agent gymnasium vector envs

    def __init__(self, rate_limiter: str, samples_per_insert: float,
                 error_buffer: float) -> None:
        self.rate_limiter = rate_limiter
        self.spi, self.error_buffer = samples_per_insert, error_buffer

    def _spi_owed(self, learner: OffPolicyLearner, state: LoopState, inserts: int) -> int:
        """Updates short of samples_per_insert x (inserts past learning_starts)."""
        target = int(self.spi * max(0, inserts - learner.learning_starts) // learner.batch_size)
        return max(0, target - state.updates)

    def run(self, t: Training, state: LoopState) -> dict[str, float]:
        pool = t.actors_as(ActorPool)
        learner = t.learner_as(OffPolicyLearner)
        timer = PhaseTimer(state.phase_s)
        updates = Updates(learner, t.replay, t.precision, state)
        n_envs = t.envs.num_envs
        learner_metrics: dict = {}
        boundary = StepBoundary(t, state)
        # a pull every `pull_every` steps, with the newest weights (published at each change)
        dispatch = Dispatcher(pool, learner, pool.pull_every, n_envs, t.steps, state.step,
                              state.phase_s)
        backlog: deque[Chunk] = deque()  # chunks handed back, not learned from yet
        deferred: set[int] = set()  # actors whose next pull waits for the learner

        def serve(block: bool) -> None:
            """Answer the actors that have finished a chunk with their next pull, unless the
            learner is behind (a chunk waits already): then the pull waits until the learner
            starts on that actor's chunk. This bounds how far the actors run ahead of the
            learner (the paper's samples-per-insert rate limiter, in chunks)."""
            for chunk in pool.results(block, stop=t.stop):
                if self._behind(learner, state, [*backlog, chunk]):
                    deferred.add(chunk.rank)
                else:
                    dispatch.send(chunk.rank)
                backlog.append(chunk)

        try:
            pool.start(learner, t.make_envs, t.seed)
            report_placement(t, state.step, pool.placement())
            for rank in range(pool.n):
                dispatch.send(rank)
            while not t.done(state):
                if not backlog:
                    with timer("wait"):
                        serve(block=True)
                    if not backlog:  # a stop request cut the wait short
                        boundary(0, state.obs, learner_metrics)  # checkpoints, then stops
                        continue
                chunk = backlog.popleft()
                if chunk.rank in deferred:
                    deferred.discard(chunk.rank)
                    dispatch.send(chunk.rank)
                learner_metrics = self._learn(chunk, t, state, timer, updates,
                                              lambda: serve(block=False)) or learner_metrics
                boundary(int(chunk.stats["steps"]), state.obs, learner_metrics)
        finally:
            pool.close()
        metrics = loop_metrics(state, learner, learner_metrics)
        inserted = state.step - learner.learning_starts
        if inserted > 0:  # the ratio the learner kept: samples per transition inserted
            metrics["actorq/samples_per_insert"] = (state.updates * learner.batch_size
                                                    / inserted)
        return metrics

    def _behind(self, learner: OffPolicyLearner, state: LoopState, waiting: list) -> bool:
        """Whether an actor's next pull waits: a chunk waits to be learned (chunk), or the
        learner is more than `error_buffer` samples short of samples_per_insert x the
        transitions inserted and handed back (samples_per_insert)."""
        if self.rate_limiter == "chunk":
            return len(waiting) > 1
        pending = sum(len(c.obs) * len(c.obs[0]) for c in waiting)
        owed = self._spi_owed(learner, state, state.step + pending)
        return owed * learner.batch_size > self.error_buffer

    def _learn(self, chunk: Chunk, t: Training, state: LoopState, timer: PhaseTimer,
               updates: Updates, serve: Callable[[], None]) -> dict:
        """Store a chunk's transitions and run the updates its env steps are owed, serving
        the actors' pulls between updates."""
        replay = t.replay_as(UniformReplay)  # single-agent rings
        with timer("replay_add"):
            replay.add_steps(chunk.obs, chunk.actions, chunk.rewards, chunk.next_obs,
                             chunk.terminated, chunk.truncated, stream=chunk.rank)
        owed = sum(updates.owed(len(steps)) for steps in chunk.obs)
        if self.rate_limiter == "samples_per_insert":
            owed = self._spi_owed(t.learner_as(OffPolicyLearner), state, state.step)
        state.record_episodes(chunk.returns)
        state.record_actor(chunk.rank, chunk.stats)
        metrics: dict = {}
        for _ in range(owed):
            metrics = updates.step()
            serve()
        return metrics
