"""PEARL's training protocol (specs/ap-drl-pearl.md §B.2.3-B.2.5) on this host's cores.

Actor workers (ActorQ's pools: OS processes with `actors=process`, Ray actors with
`actors=ray`) step their envs `collect_steps` vector steps at a time and hand the chunk back;
the host runtime (this loop) owns the replay (RM and Exp Memory). One iteration:

1. collect: finished chunks go to the data collection buffer, not yet into the replay, and
   their actors are asked for more (with the newest weights, if theirs are older): each has
   `IN_FLIGHT` chunks asked of it, so it goes on with the next while the host learns;
2. sample: the shared update step (`Updates.step`) samples a batch;
3. insert: right after sampling, the whole collection buffer is inserted in one batch, before
   the learner trains on the sampled batch (the paper inserts on a second thread meanwhile; in
   CPython that thread held the GIL for the whole insertion, so the learner waited anyway, and
   its hand-offs cost: inline, the loop made 1.10x the EPS, the median of 4 interleaved pairs);
4. collision check: the priority update of every sampled slot that insertion overwrote is
   dropped (`pearl/collisions`), so an old TD error never lands on a new experience;
5. learn, then 6. publish the weights every `weight_sync_every` learner iterations as one
   version-tagged message (an actor loads a whole version or none).

Algorithm 1 (`dynamic_resources`) runs every `resource_every` iterations on the window's
profiled times: when the learner dominates, half the actors stop being resubmitted and their
cores become CPU trainers, which train b rows of each batch beside the learner's BS − b
(`hetrl.scheduler.pearl_train`; b grows while the learner dominates, shrinks when the CPU
trainers do); when host sync (weight publication and the wait for the trainers' gradients)
dominates, one trainer goes back to acting. Every decision is reported with the EPS before and
after it. A compiled update or float16 loss scaling trains whole batches: b stays 0 (said once
in the log).

`PearlHost` is one run of the protocol, each step a method of it: `collect`, `warm_up`
(nothing to learn from yet), `learn` (sample, with `sample_and_insert` and
`check_collisions` inside the update step), `manage_resources` (Algorithm 1).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from time import perf_counter
from typing import Callable

import numpy as np

from hetrl.actors.dispatch import Dispatcher
from hetrl.actors.pool import ActorPool
from hetrl.actors.process import ProcessActors
from hetrl.actors.shared import ChunkRing, DoubleBuffer, flatten
from hetrl.actors.worker import Chunk
from hetrl.algos.base import Batch, OffPolicyLearner
from hetrl.replay.uniform import UniformReplay
from hetrl.scheduler.base import LoopNeeds
from hetrl.scheduler.boundary import StepBoundary, loop_metrics, report_placement
from hetrl.scheduler.context import Training
from hetrl.scheduler.pearl_runtime import CollisionCheck, ResourceManager, Timings
from hetrl.scheduler.pearl_train import CpuTrainers
from hetrl.scheduler.state import LoopState, Report
from hetrl.scheduler.updates import Updates

log = logging.getLogger(__name__)
ACTIONS = {"none": 0, "shrink_actors": 1, "grow_b": 2, "shrink_b": 3, "give_core_back": 4}
IN_FLIGHT = 2
"""Chunks asked of each actor at a time: it starts the next as it hands one back, not once the
host, busy learning, reads that one and asks again (an actor waited for its next command a
third of its time with one)."""


class PearlScheduler:
    needs = LoopNeeds(actor_pool=True)

    def __init__(self, weight_sync_every: int, collect_steps: int, dynamic_resources: bool,
                 resource_every: int) -> None:
        self.weight_sync_every, self.collect_steps = weight_sync_every, collect_steps
        self.dynamic_resources, self.resource_every = dynamic_resources, resource_every

    def run(self, t: Training, state: LoopState) -> dict[str, float]:
        host = PearlHost(self, t, state)
        try:
            host.start()
            while not t.done(state) or host.flushing():
                host.collect()
                if host.warming_up():
                    host.warm_up()
                    continue
                host.learn()
                if self.dynamic_resources and host.iterations % self.resource_every == 0:
                    host.manage_resources()
                host.end_iteration()
        finally:
            host.close()
        return host.results()


@dataclass
class Window:
    """What Algorithm 1 decides on: the iterations since its last decision, and what the
    actors, the learner and the weight sync spent meanwhile."""

    start: float  # when it began (perf_counter)
    updates: int  # the loop's updates then
    learner_s: float  # phase_s["update"] then
    sync_s: float  # phase_s["publish"] then
    train_cpu_s: float  # the CPU trainers' seconds then
    wait_s: float  # the learner's wait for their gradients then
    actor_s: float = 0.0  # the actors' busy seconds since, summed over actors
    experiences: int = 0  # env steps handed back since

    @classmethod
    def opened(cls, state: LoopState, trainers: CpuTrainers,
               start: float | None = None) -> Window:
        """A window opening now (or at `start`) on the loop's counters."""
        return cls(perf_counter() if start is None else start, state.updates,
                   state.phase_s.get("update", 0.0), state.phase_s.get("publish", 0.0),
                   trainers.train_cpu_s, trainers.sync_s)

    def timings(self, state: LoopState, trainers: CpuTrainers, actors: int) -> Timings:
        """Algorithm 1's four times per iteration of the window: the actors' (each's share),
        the learner's step (less its wait for the trainers), host sync (weight publication
        and that wait) and the CPU trainers' part."""
        n = max(state.updates - self.updates, 1)
        wait = trainers.sync_s - self.wait_s
        return Timings(self.actor_s / max(actors, 1) / n,
                       (state.phase_s.get("update", 0.0) - self.learner_s - wait) / n,
                       (state.phase_s.get("publish", 0.0) - self.sync_s + wait) / n,
                       (trainers.train_cpu_s - self.train_cpu_s) / n)


class PearlHost:
    """One run of PEARL's host runtime: the parts it coordinates (actor pool, dispatcher,
    replay, update step, collision check, resource manager) and its progress (the data
    collection buffer, the updates owed, the idle actors, the resource window)."""

    def __init__(self, cfg: PearlScheduler, t: Training, state: LoopState) -> None:
        self.cfg, self.t, self.state = cfg, t, state
        self.pool = pool = t.actors_as(ActorPool)
        self.learner = learner = t.learner_as(OffPolicyLearner)
        self.replay = t.replay_as(UniformReplay)  # single-agent rings
        self.n_envs = n_envs = t.envs.num_envs
        self.phase = state.phase_s
        self.check = CollisionCheck(self.replay.capacity)
        self.trainers = CpuTrainers(learner, pool.n)
        self.manager = ResourceManager(pool.n, learner.batch_size,
                                       sub_batch=self.trainers.applies())
        if cfg.dynamic_resources and not self.trainers.applies():
            log.info("scheduler=pearl: the %s trains whole batches, so Algorithm 1 keeps b = 0",
                     "compiled update" if learner.compiled_step else "float16 loss scaling")
        self.active = set(range(pool.n))
        self.events: list[dict[str, float]] = []
        self.window = Window.opened(state, self.trainers)
        # Weights: process actors read a shared, version-tagged double buffer before every
        # vector step (a pull is a tag read, no message; a long chunk acts with new weights
        # as soon as they are published); Ray actors get the serialized state dict with each
        # chunk, as ActorQ's.
        self.shared = (DoubleBuffer(flatten(learner.policy()).numel())
                       if isinstance(pool, ProcessActors) else None)
        self.dispatch = Dispatcher(pool, learner, cfg.collect_steps, n_envs, t.steps,
                                   state.step, self.phase, cfg.weight_sync_every, self.shared)
        # The learner owes the sync loop's updates (train_freq, gradient_steps); an actor is
        # not sent off again while more than `lag` of them are owed, and the owed ones are paid
        # after the last chunk, so the update-to-data ratio is the sync scheduler's.
        per_round = -(-pool.n * cfg.collect_steps * n_envs // learner.train_freq)
        self.lag = 2 * max(learner.gradient_steps, per_round * learner.gradient_steps)
        self.idle: list[int] = []  # actors not sent off again while too many updates are owed
        self.asked = dict.fromkeys(range(pool.n), 0)  # rank -> its chunks asked, unanswered
        self.buffer: list[Chunk] = []  # the data collection buffer
        self.iterations, self.owed, self.pending_steps = 0, 0, 0
        self.learner_metrics: dict = {}
        self.boundary = StepBoundary(dataclasses.replace(t, report=self._report), state)
        self.updates = Updates(learner, self.replay, t.precision, state)

    def start(self) -> None:
        """Start the actors (with shared-memory collection queues, for processes) and send
        each off on its first chunks."""
        t, pool = self.t, self.pool
        if self.shared is not None:  # data collection queues in shared memory, one per actor
            pool.rings = {rank: ChunkRing(self.cfg.collect_steps, self.n_envs,
                                          t.envs.single_observation_space,
                                          t.envs.single_action_space, slots=IN_FLIGHT)
                          for rank in range(pool.n)}
        pool.start(self.learner, t.make_envs, t.seed)
        report_placement(t, self.state.step, pool.placement())
        for rank in range(pool.n):
            self.submit(rank)

    def submit(self, rank: int) -> None:
        """Send an active actor off on its next chunks, with the newest weights it lacks,
        until `IN_FLIGHT` are asked of it (or the whole budget is)."""
        while (rank in self.active and self.asked[rank] < IN_FLIGHT
               and self.dispatch.send(rank)):
            self.asked[rank] += 1

    def collect(self) -> None:
        """1. Finished chunks go to the data collection buffer; their actors are sent off
        again unless more than `lag` updates are owed (then they wait, idle)."""
        state, phase, window = self.state, self.phase, self.window
        ready = len(self.replay) >= self.learner.batch_size and self.owed > 0
        for chunk in self.pool.results(block=not ready and not self.buffer, stop=self.t.stop):
            self.buffer.append(chunk)
            self.asked[chunk.rank] -= 1
            state.record_episodes(chunk.returns)
            state.record_actor(chunk.rank, chunk.stats)
            busy = chunk.stats.get("step_s", 0.0) + chunk.stats.get("env_s", 0.0)
            phase["actor"] = phase.get("actor", 0.0) + busy / max(len(self.active), 1)
            window.actor_s += busy
            n = int(chunk.stats["steps"])
            window.experiences += n
            self.owed += self.updates.owed(n)
            self.pending_steps += n
            if self.owed > self.lag:
                self.idle.append(chunk.rank)
            else:
                self.submit(chunk.rank)

    def warming_up(self) -> bool:
        """Nothing to learn from yet: too few experiences, or no update owed."""
        return len(self.replay) < self.learner.batch_size or self.owed == 0

    def warm_up(self) -> None:
        """The buffer straight into the replay; the idle actors sent off again."""
        self.insert(self.buffer)
        while self.idle:
            self.submit(self.idle.pop(0))
        self.buffer = []
        self.boundary(self.pending_steps, self.state.obs, self.learner_metrics)
        self.pending_steps = 0

    def learn(self) -> None:
        """2-5. One learner iteration: sample, insert the buffer, learn, check the
        collisions; then send the idle actors off while few are owed."""
        self.learner_metrics = self.updates.step(self.sample_and_insert)
        self.owed -= 1
        self.iterations += 1
        while self.idle and self.owed <= self.lag:
            self.submit(self.idle.pop(0))

    def sample_and_insert(self, batch: Batch) -> Callable[[np.ndarray], np.ndarray | None]:
        """3. Once a batch is sampled, the whole buffer goes into the replay; returns the
        collision check of step 4: the sampled rows whose priority update may go in, those
        whose slot the insertion did not overwrite."""
        self.check.sampled(batch.indices)
        self.insert(self.buffer)
        self.buffer = []
        return self.check.keep

    def insert(self, chunks: list[Chunk]) -> None:
        """The batched insertion of the collection buffer, recording the slots it wrote."""
        start = perf_counter()
        for chunk in chunks:
            self.check.written(self.replay.add_steps(
                chunk.obs, chunk.actions, chunk.rewards, chunk.next_obs, chunk.terminated,
                chunk.truncated, stream=chunk.rank))
        self.phase["pearl_insert"] = self.phase.get("pearl_insert", 0.0) + perf_counter() - start

    def end_iteration(self) -> None:
        """The step boundary; past the last env step, the owed updates are logged once, at
        the last one."""
        t = self.t
        if not t.done(self.state) or not (self.owed or self.buffer) or t.stop.is_set():
            self.boundary(self.pending_steps, self.state.obs, self.learner_metrics)
            self.pending_steps = 0

    def flushing(self) -> bool:
        """Past the last env step, the buffered chunks and owed updates still run (not once
        stop_return is reached: the job ends there)."""
        return self.state.reached is None and bool(
            self.buffer or (self.owed > 0 and len(self.replay) >= self.learner.batch_size))

    def manage_resources(self) -> None:
        """Algorithm 1 on the last window's profiled times, applied to the actor pool and
        the CPU trainers; the EPS of the window before (and, at the next call, after)."""
        state, window, manager = self.state, self.window, self.manager
        now = perf_counter()
        iterations = max(state.updates - window.updates, 1)
        eps = (self.learner.batch_size * (state.updates - window.updates)
               / max(now - window.start, 1e-9))
        if self.events and "eps_after" not in self.events[-1]:
            self.events[-1]["eps_after"] = eps
        decision = manager.step(self.profiled(),
                                int(window.experiences / iterations) or 1)
        if decision.action in ("shrink_actors", "give_core_back"):
            keep = set(sorted(range(manager.actors + manager.cpu_trainers))[:decision.actors])
            revived = keep - self.active
            self.active = keep
            for rank in revived:
                self.submit(rank)
        self.trainers.set(decision.cpu_trainers, decision.b)
        if decision.action != "none":
            self._decided(decision, eps)
        self.window = Window.opened(state, self.trainers, now)

    def profiled(self) -> Timings:
        """The window's profiled times, Algorithm 1's input."""
        return self.window.timings(self.state, self.trainers, len(self.active))

    def _decided(self, decision, eps: float) -> None:
        """A decision of Algorithm 1: in the events table, and reported."""
        threads = float(1 + decision.cpu_trainers)
        self.events.append({"step": float(self.state.step),
                            "iteration": float(self.state.updates),
                            "action": ACTIONS[decision.action], "actors": float(decision.actors),
                            "learner_threads": threads, "b": float(decision.b),
                            "eps_before": eps})
        self.t.report(self.state.step, {"pearl/decision": float(ACTIONS[decision.action]),
                                        "pearl/decision_eps_before": eps,
                                        "pearl/actors": float(decision.actors),
                                        "pearl/learner_threads": threads,
                                        "pearl/b": float(decision.b)}, Report.event)

    def primitives(self) -> dict[str, float]:
        """The primitives' mean times per iteration (`pearl/t_*_s`) and the run's counts."""
        phase, n = self.phase, max(self.iterations, 1)
        times = {"t_actor_s": phase.get("actor", 0.0), "t_rm_sample_s": phase.get("sample", 0.0),
                 "t_rm_insert_s": phase.get("pearl_insert", 0.0),
                 "t_rm_update_s": phase.get("priority_update", 0.0),
                 "t_learner_s": phase.get("update", 0.0), "t_sync_s": phase.get("publish", 0.0),
                 "t_train_cpu_s": self.trainers.train_cpu_s}
        metrics = {f"pearl/{k}": v / n for k, v in times.items()}
        metrics.update({"pearl/collisions": float(self.check.collisions),
                        "pearl/iterations": float(self.iterations),
                        "pearl/actors": float(len(self.active)),
                        "pearl/learner_threads": float(1 + self.trainers.trainers),
                        "pearl/b": float(self.trainers.b)})
        return metrics

    def _report(self, step: int, metrics: dict[str, float], kind: Report) -> None:
        if kind is Report.loop:
            metrics = {**metrics, **self.primitives(), "env_steps_per_s": metrics["sps"]}
        self.t.report(step, metrics, kind)

    def close(self) -> None:
        self.trainers.close()
        self.pool.close()

    def results(self) -> dict[str, float]:
        """The final metrics; Algorithm 1's decisions as `pearl/resource_decisions.csv`."""
        if self.events and self.t.log_text is not None:
            self.t.log_text(_table(self.events), "pearl/resource_decisions.csv")
        results = loop_metrics(self.state, self.learner, self.learner_metrics)
        results.update(self.primitives())
        results["env_steps_per_s"] = results["sps"]
        return results


def _table(events: list[dict[str, float]]) -> str:
    keys = ["step", "iteration", "action", "actors", "learner_threads", "b", "eps_before",
            "eps_after"]
    names = {v: k for k, v in ACTIONS.items()}
    rows = [",".join(keys)]
    for e in events:
        cells = [names[int(e["action"])] if k == "action" else f"{e.get(k, float('nan')):.6g}"
                 for k in keys]
        rows.append(",".join(cells))
    return "\n".join(rows) + "\n"
