"""`actors=process`: ActorQ's actors as OS processes, one duplex pipe each.

The learner sends ("collect", message, steps, step); the actor answers ("chunk", Chunk) or
("error", traceback) and is then idle until the next command, so a pull is synchronous on
the actor's side (QuaRL A.1.4) and its `pull_s` is the time from handing back a chunk to
holding the next message. Actors ignore SIGINT: Ctrl-C reaches the whole process group and
the learner stops them itself; SIGTERM ends an actor at once.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import traceback
from multiprocessing.connection import Connection, wait
from pathlib import Path
from time import perf_counter
from typing import Callable

import gymnasium as gym
import torch

from hetrl.actors.pool import WAIT_SLICE_S, ActorError, ActorLost, ActorPool
from hetrl.actors.worker_logs import log_to, said, worker_log
from hetrl.actors.workers import leave_stops_to_the_job, process_state, starting
from hetrl.actors.worker import ActorWorker, Chunk, cpu_copy
from hetrl.algos.base import Learner
from hetrl.faults import exit_words
from hetrl.quant import QuantSpec

STOP_TIMEOUT_S = 10.0  # then the actors that have not exited are terminated


def _serve(conn: Connection, rank: int, n_actors: int, learner: Learner,
           make_envs: Callable[[], gym.vector.VectorEnv], seed: int, spec: QuantSpec,
           ring=None, log_file: Path | None = None, nice: int = 0) -> None:
    """An actor process, at `nice` below the learner's priority: collect chunks on command
    until told to stop; with a `ring` (PEARL's shared-memory data collection queue) a chunk's
    arrays go there, not through the pipe."""
    leave_stops_to_the_job()
    os.nice(nice)
    log_to(log_file)
    worker = None
    try:
        worker = ActorWorker(rank, n_actors, learner, make_envs, seed, spec)
        handed_back = perf_counter()
        while (command := conn.recv())[0] == "collect":
            _, payload, steps, step = command
            chunk = worker.collect(payload, steps, step, pull_s=perf_counter() - handed_back)
            conn.send(("chunk", chunk if ring is None else ring.put(chunk)))
            handed_back = perf_counter()
    except (EOFError, BrokenPipeError):
        pass  # the learner is gone
    except BaseException:
        conn.send(("error", f"actor {rank}:\n{traceback.format_exc()}"))
    finally:
        if worker is not None:
            worker.close()
        conn.close()


def resolved_start_method(start_method: str) -> str:
    """`auto`: fork while this process has not initialised CUDA (a forked child could not use
    it) and the OS can fork, else spawn. A fork starts an actor in milliseconds; a spawn
    re-imports torch, gymnasium and hetrl in it (2-8 s on 2 cores, most of a short run)."""
    if start_method != "auto":
        return start_method
    forkable = "fork" in mp.get_all_start_methods() and not torch.cuda.is_initialized()
    return "fork" if forkable else "spawn"


class ProcessActors(ActorPool):
    def __init__(self, start_method: str, nice: int, **pool) -> None:
        super().__init__(**pool)
        self.start_method, self.nice = start_method, nice
        self.processes: list[mp.process.BaseProcess] = []
        self.conns: list[Connection] = []
        self.submitted: dict[int, list[float]] = {}  # rank -> when its unanswered chunks
        # were asked, oldest first (PEARL keeps two asked of each actor)
        self.hung: set[int] = set()  # ranks found hung: killed at once by close()
        self.rings: dict = {}  # rank -> its shared-memory ChunkRing (scheduler=pearl), if any

    def start(self, learner: Learner, make_envs: Callable[[], gym.vector.VectorEnv],
              seed: int) -> None:
        method = resolved_start_method(self.start_method)
        context = mp.get_context(method)
        copy = cpu_copy(learner)
        self.logs = [worker_log(f"actor-{rank}") for rank in range(self.n)]
        for rank in range(self.n):
            here, there = context.Pipe()
            process = context.Process(
                target=_serve, args=(there, rank, self.n, copy, make_envs, seed, self.spec,
                                     self.rings.get(rank), self.logs[rank], self.nice),
                name=f"hetrl-actor-{rank}", daemon=True)
            with starting(method):
                process.start()
            there.close()
            self.processes.append(process)
            self.conns.append(here)

    def submit(self, rank: int, payload: bytes | None, steps: int, step: int) -> None:
        try:
            self.conns[rank].send(("collect", payload, steps, step))
        except OSError:  # its end of the pipe is closed: the actor is gone
            raise self._exited(rank) from None
        self.submitted.setdefault(rank, []).append(perf_counter())

    def _exited(self, rank: int) -> ActorError:
        process = self.processes[rank]
        process.join(timeout=1.0)  # its exit code, once reaped
        return self.died_error(f"{rank} (pid {process.pid})",
                               f"{exit_words(process.exitcode)}{said(self.logs[rank])}")

    def results(self, block: bool = True, stop: threading.Event | None = None) -> list[Chunk]:
        chunks: list[Chunk] = []
        while True:
            ready = wait(self.conns, timeout=WAIT_SLICE_S if block else 0)
            for conn in ready:
                rank = self.conns.index(conn)
                try:
                    kind, body = conn.recv()
                except (EOFError, OSError):
                    raise self._exited(rank) from None
                if kind == "error":
                    raise ActorError(body)
                waiting = self.submitted.pop(rank, [])[1:]
                if waiting:  # the next chunk asked of it, timed from now: it starts on it now
                    self.submitted[rank] = [perf_counter(), *waiting[1:]]
                chunks.append(body if rank not in self.rings else self.rings[rank].get(body))
            self._check_answered(ready)
            if chunks or not block or (stop is not None and stop.is_set()):
                return chunks

    def _check_answered(self, ready: list) -> None:
        """Raise for an actor whose chunk is overdue and has sent nothing (a chunk sent but
        not yet read would have made its pipe ready)."""
        now = perf_counter()
        for rank, (since, *_) in self.submitted.items():
            if self.conns[rank] not in ready and now - since > self.timeout_s:
                self.hung.add(rank)
                process = self.processes[rank]
                raise self.hung_error(rank, now - since, f" (pid {process.pid}, "
                                      f"{process_state(process.pid)}{said(self.logs[rank])})")

    def close(self) -> None:
        """Stop every actor: kill the hung and the stopped ones (SIGSTOP: they could answer
        no request, and a stopped process takes no signal but SIGKILL), ask the others, drain
        what they still send, then terminate stragglers."""
        for rank, process in enumerate(self.processes):
            if rank in self.hung or process_state(process.pid) == "stopped":
                process.kill()
        for conn in self.conns:
            try:
                conn.send(("stop",))
            except (BrokenPipeError, OSError):
                pass
        deadline = perf_counter() + STOP_TIMEOUT_S
        open_conns = list(self.conns)
        while open_conns and perf_counter() < deadline:
            for conn in wait(open_conns, timeout=0.1):
                try:
                    conn.recv()
                except (EOFError, OSError):
                    open_conns.remove(conn)
        for process in self.processes:
            process.join(timeout=max(0.0, deadline - perf_counter()))
            if process.is_alive():
                process.terminate()
                process.join(timeout=1.0)
            if process.is_alive():
                process.kill()
                process.join()
        for conn in self.conns:
            conn.close()
        for ring in self.rings.values():
            ring.close()
        self.processes, self.conns, self.rings = [], [], {}
        self.submitted, self.hung = {}, set()
