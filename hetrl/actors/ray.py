"""`actors=ray`: ActorQ's actors as Ray actors, on a local Ray (started here) or a cluster
(`actors.address`). Messages go through Ray's object store, put once per version and pulled by
each actor itself, so its `pull_s` is Ray's fetch of the object.

Each actor logs into the job's `workers/actor-<rank>.log` as a process actor does, where its
node sees the job's folder (a local Ray, a cluster sharing the file system); one that dies
or hangs is named with its Ray actor id, pid and node, how Ray says it ended, and its last
log line, or where Ray keeps its log (`Placed`). The self-play workers' Ray actors
(hetrl.actors.selfplay) log and are named the same way."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from time import perf_counter
from typing import Any, Callable

import gymnasium as gym

from hetrl.actors.base import Acting
from hetrl.actors.pool import WAIT_SLICE_S, ActorLost, ActorPool
from hetrl.actors.worker import ActorWorker, Chunk, cpu_copy
from hetrl.actors.worker_logs import log_to, said, worker_log
from hetrl.algos.base import Learner


class _RayActor:
    """The Ray actor around one ActorWorker: it fetches the message itself, timed, and logs
    into `log_file` where this node sees the job's folder it is in."""

    def __init__(self, log_file: Path | None, *worker_args: Any) -> None:
        log_where_seen(log_file)
        self.worker = ActorWorker(*worker_args)

    def collect(self, message: list, steps: int, step: int) -> Chunk:
        import ray

        start = perf_counter()
        payload = ray.get(message[0]) if message else None  # a ref in a list: ours to fetch
        return self.worker.collect(payload, steps, step, pull_s=perf_counter() - start)

    def whereabouts(self) -> tuple[str, int, str]:
        return whereabouts()


def log_where_seen(log_file: Path | None) -> None:
    """A Ray actor's first call: it logs into `log_file` where its node sees the job's folder
    the file is in (a local Ray, a cluster sharing the file system); elsewhere Ray keeps its
    output."""
    log_to(log_file if log_file is not None and log_file.parent.parent.is_dir() else None)


def whereabouts() -> tuple[str, int, str]:
    """The Ray node the calling actor was placed on (its IP and node id), its pid, its actor
    id."""
    import ray

    return ray_node(), os.getpid(), ray.get_runtime_context().get_actor_id()


class Placed:
    """Started Ray actors as messages name them: each one's node, actor id, name (`Ray actor
    <id>, pid <pid> on <node>`) and log (None where its node did not see the job's folder),
    asked of each handle's `whereabouts` once they run."""

    def __init__(self, handles: list[Any], logs: list[Path | None]) -> None:
        import ray

        found = ray.get([handle.whereabouts.remote() for handle in handles])
        self.nodes = [node for node, _, _ in found]
        self.ids = [actor_id for _, _, actor_id in found]
        self.names = [f"Ray actor {actor_id[:12]}, pid {pid} on {node}"
                      for node, pid, actor_id in found]
        self.logs = [log if log is not None and log.is_file() else None for log in logs]

    def said(self, rank: int) -> str:
        """Who actor `rank` is, with its last log line or where Ray keeps its log."""
        if self.logs[rank] is not None:
            return f"{self.names[rank]}{said(self.logs[rank])}"
        return (f"{self.names[rank]}; its log is Ray's, on its node: ray logs actor --id "
                f"{self.ids[rank]} --err")


def ray_node() -> str:
    """The Ray node the calling actor runs on: its IP and node id."""
    import ray

    context = ray.get_runtime_context()
    return f"{ray.util.get_node_ip_address()}/{context.get_node_id()[:12]}"


def init_ray(address: str | None, num_cpus: int) -> bool:
    """Join the cluster at `address`, or start Ray here with `num_cpus` CPUs (address None),
    unless Ray is up in this process already; whether this call started it (then the caller
    shuts it down). Starting is explicit (`address="local"`): a plain `ray.init()` would join
    any cluster `ray start` left on this machine, and refuse the `num_cpus` given."""
    import ray

    if ray.is_initialized():
        return False
    own = {} if address else {"num_cpus": num_cpus, "include_dashboard": False}
    ray.init(address=address or "local", log_to_driver=False, **own)
    return True


class RayActors(ActorPool):
    acting = Acting(pool=True, ray=True)

    def __init__(self, address: str | None, **pool) -> None:
        super().__init__(**pool)
        self.address = address
        self.handles: list[Any] = []
        self.pending: dict[Any, tuple[int, float]] = {}  # result ref -> rank, when asked
        self.started_ray = False
        self._message: tuple[bytes, Any] | None = None  # the last payload and its ref
        self.placed: Placed | None = None  # once started

    def start(self, learner: Learner, make_envs: Callable[[], gym.vector.VectorEnv],
              seed: int) -> None:
        import ray

        self.started_ray = init_ray(self.address, self.n)
        remote = ray.remote(num_cpus=1)(_RayActor)
        copy = ray.put(cpu_copy(learner))
        self.logs = [worker_log(f"actor-{rank}") for rank in range(self.n)]
        self.handles = [remote.remote(self.logs[rank], rank, self.n, copy, make_envs, seed,
                                      self.spec) for rank in range(self.n)]
        self.placed = Placed(self.handles, self.logs)
        self.logs = self.placed.logs

    def placement(self) -> dict[int, str]:
        return dict(enumerate(self.placed.nodes)) if self.placed else {}

    def submit(self, rank: int, payload: bytes | None, steps: int, step: int) -> None:
        import ray

        if payload is not None and (self._message is None or self._message[0] is not payload):
            self._message = (payload, ray.put(payload))
        message = [] if payload is None else [self._message[1]]
        self.pending[self.handles[rank].collect.remote(message, steps, step)] = (
            rank, perf_counter())

    def results(self, block: bool = True, stop: threading.Event | None = None) -> list[Chunk]:
        import ray

        while self.pending:
            ready, _ = ray.wait(list(self.pending), num_returns=1,
                                timeout=WAIT_SLICE_S if block else 0)
            now = perf_counter()
            for ref, (rank, since) in self.pending.items():
                if ref not in ready and now - since > self.timeout_s:
                    raise self.hung_error(rank, now - since, f" ({self.placed.said(rank)})")
            for ref in ready:
                del self.pending[ref]
            if ready or not block or (stop is not None and stop.is_set()):
                try:
                    return ray.get(ready)
                except ray.exceptions.RayActorError as error:
                    raise self._died(error) from None
        return []

    def _died(self, error: Exception) -> ActorLost:
        """The ActorLost of a Ray actor Ray found dead: who, Ray's words for how it ended."""
        ids = self.placed.ids
        rank = ids.index(error.actor_id) if error.actor_id in ids else None
        words = getattr(error, "error_msg", str(error)).splitlines()[-1]
        how = words.split(" Some common causes")[0].removeprefix("The actor is dead because ")
        if rank is None:
            return self.died_error(f"(Ray actor {error.actor_id})", how[:300], look="")
        return self.died_error(f"{rank} ({self.placed.said(rank)})", how[:300], look="")

    def close(self) -> None:
        import ray

        for handle in self.handles:
            ray.kill(handle)
        self.handles, self.pending, self._message = [], {}, None
        if self.started_ray:
            ray.shutdown()
            self.started_ray = False
