"""PEARL's training protocol (specs/ap-drl-pearl.md §B.2.3-B.2.5) on this host's cores.

Actor workers (ActorQ's pools: OS processes with `actors=process`, Ray actors with
`actors=ray`) step their envs `collect_steps` vector steps at a time and hand the chunk back;
the host runtime (this loop) owns the replay (RM and Exp Memory). One iteration:

1. collect: finished chunks go to the data collection buffer, not yet into the replay, and
   their actors are sent off again (with the newest weights, if theirs are older);
2. sample: the shared update step (`Updates.step`) samples a batch;
3. insert: right after sampling, the whole collection buffer is inserted in one batch, on a
   second thread, while the learner trains on the sampled batch;
4. collision check: the priority update of every sampled slot that insertion overwrote is
   dropped (`pearl/collisions`), so an old TD error never lands on a new experience;
5. learn, then 6. publish the weights every `weight_sync_every` learner iterations as one
   version-tagged message (an actor loads a whole version or none).

Algorithm 1 (`dynamic_resources`) runs every `resource_every` iterations on the window's
profiled times: when the learner dominates, half the actors stop being resubmitted and their
cores go to the learner (torch threads); when host sync dominates, one goes back to acting.
Every decision is reported with the EPS before and after it.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future, ThreadPoolExecutor
from time import perf_counter

import numpy as np
import torch

from hetrl.actors.pool import ActorPool
from hetrl.actors.weights import publish
from hetrl.actors.worker import Chunk
from hetrl.algos.base import Batch, OffPolicyLearner
from hetrl.config.enums import Agents
from hetrl.replay.uniform import UniformReplay
from hetrl.scheduler.context import StepBoundary, Training, loop_metrics, report_placement
from hetrl.scheduler.pearl_runtime import (
    ChunkRing,
    CollisionCheck,
    DoubleBuffer,
    ResourceManager,
    Timings,
    flatten,
)
from hetrl.scheduler.state import LoopState, Report
from hetrl.scheduler.updates import Updates

ACTIONS = {"none": 0, "shrink_actors": 1, "grow_b": 2, "shrink_b": 3, "give_core_back": 4}
PRIMITIVES = ("t_actor_s", "t_rm_sample_s", "t_rm_insert_s", "t_rm_update_s", "t_learner_s",
              "t_sync_s")


class PearlScheduler:
    on_policy = False
    actor_pool = True  # actors=process or actors=ray
    agents = (Agents.single,)

    def __init__(self, weight_sync_every: int = 10, collect_steps: int = 16,
                 dynamic_resources: bool = True, resource_every: int = 200) -> None:
        self.weight_sync_every, self.collect_steps = weight_sync_every, collect_steps
        self.dynamic_resources, self.resource_every = dynamic_resources, resource_every

    def run(self, t: Training, state: LoopState) -> dict[str, float]:
        pool: ActorPool = t.actors  # type: ignore[assignment]  # validate() ensures it
        learner: OffPolicyLearner = t.learner  # type: ignore[assignment]
        replay: UniformReplay = t.replay  # type: ignore[assignment]  # single-agent rings
        n_envs = t.envs.num_envs
        phase = state.phase_s
        check = CollisionCheck(replay.capacity)
        manager = ResourceManager(pool.n, learner.batch_size)
        active = set(range(pool.n))
        events: list[dict[str, float]] = []
        window = {"start": perf_counter(), "updates": state.updates, "actor_s": 0.0,
                  "experiences": 0, "learner_s": phase.get("update", 0.0),
                  "sync_s": phase.get("publish", 0.0)}
        requested = state.step
        version, payload, pulled = -1, b"", {}
        buffer: list[Chunk] = []
        iterations = 0
        # Weights: process actors read a shared, version-tagged double buffer (a pull is a tag
        # read, no message); Ray actors get the serialized state dict as ActorQ's.
        from hetrl.actors.process import ProcessActors

        shared = (DoubleBuffer(flatten(learner.policy()).numel())
                  if isinstance(pool, ProcessActors) else None)
        published, handed = 0, set()
        # The learner owes the sync loop's updates (train_freq, gradient_steps); an actor is
        # not sent off again while more than `lag` of them are owed, and the owed ones are paid
        # after the last chunk, so the update-to-data ratio is the sync scheduler's.
        per_round = -(-pool.n * self.collect_steps * n_envs // learner.train_freq)
        lag = 2 * max(learner.gradient_steps, per_round * learner.gradient_steps)
        idle: list[int] = []

        def primitives() -> dict[str, float]:
            n = max(iterations, 1)
            times = {"t_actor_s": phase.get("actor", 0.0), "t_rm_sample_s": phase.get("sample", 0.0),
                     "t_rm_insert_s": phase.get("pearl_insert", 0.0),
                     "t_rm_update_s": phase.get("priority_update", 0.0),
                     "t_learner_s": phase.get("update", 0.0), "t_sync_s": phase.get("publish", 0.0)}
            metrics = {f"pearl/{k}": v / n for k, v in times.items()}
            metrics.update({"pearl/collisions": float(check.collisions),
                            "pearl/iterations": float(iterations),
                            "pearl/actors": float(len(active)),
                            "pearl/learner_threads": float(torch.get_num_threads())})
            return metrics

        def report(step: int, metrics: dict[str, float], kind: Report) -> None:
            if kind is Report.loop:
                metrics = {**metrics, **primitives(), "env_steps_per_s": metrics["sps"]}
            t.report(step, metrics, kind)

        boundary = StepBoundary(dataclasses.replace(t, report=report), state)
        updates = Updates(learner, replay, t.precision, state)

        def submit(rank: int) -> None:
            nonlocal requested, version, payload
            steps = min(self.collect_steps, -(-(t.steps - requested) // n_envs))
            if steps <= 0 or rank not in active:
                return
            nonlocal published
            if version < 0 or (learner.updates // self.weight_sync_every
                               > version // self.weight_sync_every):
                start = perf_counter()
                if shared is not None:
                    shared.write(published, flatten(learner.policy()))
                    published += 1
                else:
                    payload = publish(learner.policy(), pool.spec, pool.quantize_on)
                version = learner.updates
                phase["publish"] = phase.get("publish", 0.0) + perf_counter() - start
            if shared is not None:
                pool.submit(rank, shared if rank not in handed else None, steps, requested)
                handed.add(rank)
            else:
                pool.submit(rank, payload if pulled.get(rank) != version else None, steps,
                            requested)
            pulled[rank] = version
            requested += steps * n_envs

        def insert(chunks: list[Chunk]) -> None:
            """The batched insertion of the collection buffer, recording the slots it wrote."""
            start = perf_counter()
            for chunk in chunks:
                check.written(replay.add_steps(chunk.obs, chunk.actions, chunk.rewards,
                                               chunk.next_obs, chunk.terminated,
                                               chunk.truncated, stream=chunk.rank))
            phase["pearl_insert"] = phase.get("pearl_insert", 0.0) + perf_counter() - start

        def flushing() -> bool:
            """Past the last env step, the buffered chunks and owed updates still run
            (not once stop_return is reached: the job ends there)."""
            return state.reached is None and bool(
                buffer or (owed > 0 and len(replay) >= learner.batch_size))

        executor = ThreadPoolExecutor(1, thread_name_prefix="pearl-insert")
        threads = torch.get_num_threads()  # Algorithm 1 moves cores to the learner: given back
        owed, pending_steps, learner_metrics = 0, 0, {}
        try:
            if shared is not None:  # data collection queues in shared memory, one per actor
                pool.rings = {rank: ChunkRing(self.collect_steps, n_envs,
                                              t.envs.single_observation_space,
                                              t.envs.single_action_space)
                              for rank in range(pool.n)}
            pool.start(learner, t.make_envs, t.seed)
            report_placement(t, state.step, pool.placement())
            for rank in range(pool.n):
                submit(rank)
            while not t.done(state) or flushing():
                # 1. collect into the data collection buffer; resubmit the finished actors
                ready = len(replay) >= learner.batch_size and owed > 0
                for chunk in pool.results(block=not ready and not buffer, stop=t.stop):
                    buffer.append(chunk)
                    state.record_episodes(chunk.returns)
                    totals = state.actors.setdefault(chunk.rank, {})
                    for name, value in chunk.stats.items():
                        totals[name] = totals.get(name, 0.0) + value
                    busy = chunk.stats.get("step_s", 0.0) + chunk.stats.get("env_s", 0.0)
                    phase["actor"] = phase.get("actor", 0.0) + busy / max(len(active), 1)
                    window["actor_s"] += busy
                    window["experiences"] += int(chunk.stats["steps"])
                    n = int(chunk.stats["steps"])
                    owed += updates.owed(n)
                    pending_steps += n
                    if owed > lag:
                        idle.append(chunk.rank)
                    else:
                        submit(chunk.rank)
                if len(replay) < learner.batch_size or owed == 0:
                    insert(buffer)  # warm-up: nothing to learn from yet
                    while idle:
                        submit(idle.pop(0))
                    buffer = []
                    boundary(pending_steps, state.obs, learner_metrics)
                    pending_steps = 0
                    continue
                # 2-5. sample; insert concurrently with learning; collision check; learn
                future: list[Future] = []

                def after_sample(batch: Batch, future: list[Future] = future):
                    nonlocal buffer
                    check.sampled(batch.indices)
                    if buffer:
                        future.append(executor.submit(insert, buffer))
                        buffer = []

                    def keep(indices: np.ndarray, future: list[Future] = future) -> np.ndarray:
                        for f in future:
                            f.result()
                        return check.keep(indices)

                    return keep

                learner_metrics = updates.step(after_sample)
                for f in future:
                    f.result()
                owed -= 1
                iterations += 1
                while idle and owed <= lag:
                    submit(idle.pop(0))
                if self.dynamic_resources and iterations % self.resource_every == 0:
                    self._manage(manager, window, state, learner, active, events, submit, t)
                # past the last env step, the owed updates are logged once, at the last one
                if not t.done(state) or not (owed or buffer) or t.stop.is_set():
                    boundary(pending_steps, state.obs, learner_metrics)
                    pending_steps = 0
        finally:
            executor.shutdown(wait=True)
            pool.close()
            torch.set_num_threads(threads)
        if events and t.log_text is not None:
            t.log_text(_table(events), "pearl/resource_decisions.csv")
        results = loop_metrics(state, learner, learner_metrics)
        results.update(primitives())
        results["env_steps_per_s"] = results["sps"]
        return results

    def _manage(self, manager: ResourceManager, window: dict, state: LoopState,
                learner: OffPolicyLearner, active: set[int], events: list, submit,
                t: Training) -> None:
        """Algorithm 1 on the last window's profiled times, applied to the actor pool and
        the learner's threads; the EPS of the window before (and, at the next call, after)."""
        now = perf_counter()
        iterations = state.updates - window["updates"]
        eps = learner.batch_size * iterations / max(now - window["start"], 1e-9)
        if events and "eps_after" not in events[-1]:
            events[-1]["eps_after"] = eps
        learner_s = (state.phase_s.get("update", 0.0) - window["learner_s"]) / max(iterations, 1)
        sync_s = (state.phase_s.get("publish", 0.0) - window["sync_s"]) / max(iterations, 1)
        actor_s = window["actor_s"] / max(len(active), 1) / max(iterations, 1)
        per_iteration = window["experiences"] / max(iterations, 1)
        decision = manager.step(Timings(actor_s, learner_s, sync_s), int(per_iteration) or 1)
        if decision.action in ("shrink_actors", "give_core_back"):
            ranks = sorted(set(range(manager.actors + manager.cpu_trainers)))
            keep = set(ranks[:decision.actors])
            revived = keep - active
            active.clear()
            active.update(keep)
            torch.set_num_threads(1 + decision.cpu_trainers)
            for rank in revived:
                submit(rank)
        if decision.action != "none":
            events.append({"step": float(state.step), "iteration": float(state.updates),
                           "action": ACTIONS[decision.action], "actors": float(decision.actors),
                           "learner_threads": float(1 + decision.cpu_trainers),
                           "b": float(decision.b), "eps_before": eps})
            t.report(state.step, {"pearl/decision": float(ACTIONS[decision.action]),
                                  "pearl/decision_eps_before": eps,
                                  "pearl/actors": float(decision.actors),
                                  "pearl/learner_threads": float(1 + decision.cpu_trainers)},
                     Report.event)
        window.update(start=now, updates=state.updates, actor_s=0.0, experiences=0,
                      learner_s=state.phase_s.get("update", 0.0),
                      sync_s=state.phase_s.get("publish", 0.0))


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
