"""MiniGo's self-play workers (spec C.1.1, C.1.4) and the pools that run them for
`scheduler=selfplay`: OS processes fed through task queues, or Ray actors (`actors=ray`).
Each generation a worker loads the latest `best` weights, plays its share of the games and
hands each game back as it ends."""

from __future__ import annotations

import multiprocessing as mp
import queue
import socket
import time
from pathlib import Path
from typing import Any, Iterator, Protocol

import gymnasium as gym
import numpy as np
import torch

from hetrl.actors.base import Actors
from hetrl.actors.ray import Placed, RayActors, init_ray, log_where_seen, whereabouts
from hetrl.actors.worker_logs import log, log_to, worker_log
from hetrl.actors.workers import (POLL_S, check_alive, hung, leave_stops_to_the_job, named,
                                  starting, stop_workers)
from hetrl.algos.alphazero import AlphaZero, PolicyValueNet
from hetrl.algos.base import Learner
from hetrl.algos.go_games import GameRecord, evaluator, iter_games
from hetrl.algos.mcts import SearchConfig, SearchStats
from hetrl.envs.go import GoGame, GoVectorEnv
from hetrl.runtime import configure_torch


def worker_spec(game: GoGame, learner: AlphaZero) -> dict:
    """What a worker builds its game and network from."""
    return {"board_size": game.n, "komi": game.komi, "history": game.history,
            "liberties": game.liberties, "max_moves": game.max_moves,
            "width": learner.width, "blocks": learner.blocks}


class SelfPlayWorker:
    """What a self-play worker does, wherever it runs (an OS process of `WorkerPool` or a
    Ray actor of `RayWorkerPool`): each generation it loads the latest `best` weights, plays
    its share of the games and yields each game as it ends, then its search counts."""

    def __init__(self, rank: int, spec: dict, search: dict, seed: int) -> None:
        configure_torch(1)
        self.rank, self.seed = rank, seed
        self.game = GoGame(spec["board_size"], spec["komi"], spec["history"],
                           spec["liberties"], spec["max_moves"])
        self.net = PolicyValueNet(self.game.planes, self.game.n, spec["width"], spec["blocks"])
        self.cfg = SearchConfig(**search)

    def play(self, gen: int, weights: dict[str, torch.Tensor], n_games: int, concurrent: int,
             budget: int) -> Iterator[tuple[str, Any]]:
        """("game", record) for each game as it ends, then ("done", (leaves, batches))."""
        log.info("generation %d: %d games", gen, n_games)
        self.net.load_state_dict(weights)
        rng = np.random.default_rng([self.seed, gen, self.rank])
        stats = SearchStats()
        for record in iter_games(n_games, concurrent, self.game, evaluator(self.net, self.game),
                                 self.cfg, rng, stats, max_positions=budget):
            yield "game", record
        yield "done", (stats.leaves, stats.batches)


class _RaySelfPlayWorker(SelfPlayWorker):
    """A self-play worker as a Ray actor: it logs into `log_file` as ActorQ's Ray actors do
    (`log_where_seen`), and says where it runs."""

    def __init__(self, log_file: Path | None, *worker_args: Any) -> None:
        log_where_seen(log_file)
        super().__init__(*worker_args)

    def whereabouts(self) -> tuple[str, int, str]:
        return whereabouts()


class PoolOptions(Protocol):
    """What a self-play pool takes of its loop's options (`selfplay.*`)."""

    workers: int
    worker_timeout_s: float


def selfplay_pool(loop: PoolOptions, actors: Actors, learner: Learner,
                  envs: gym.vector.VectorEnv, seed: int) -> SelfPlayPool | None:
    """The pool the loop's `workers` self-play workers run in, not started: Ray actors with a
    Ray actors option, else OS processes; none with no workers (the loop plays in its own
    process). build() makes it (`LoopNeeds.workers`)."""
    if not isinstance(learner, AlphaZero) or not isinstance(envs, GoVectorEnv):
        raise TypeError(f"self-play workers play Go (GoVectorEnv) with an AlphaZero learner, "
                        f"not {type(envs).__name__} with {type(learner).__name__}")
    if isinstance(actors, RayActors):
        return RayWorkerPool(loop.workers, envs.game, learner, seed, loop.worker_timeout_s,
                             actors.address)
    if loop.workers > 0:
        return WorkerPool(loop.workers, envs.game, learner, seed, loop.worker_timeout_s)
    return None


class SelfPlayPool:
    """Self-play workers that live as long as the loop: made, then started (`start`); each
    generation they take the latest `best` weights and their share of the games, and send
    each game back as it ends. Subclasses run them somewhere (OS processes, Ray actors)."""

    stop: Any = None  # the job's stop request: a generation's wait ends on it

    def __init__(self, n: int, game: GoGame, learner: AlphaZero, seed: int,
                 timeout_s: float) -> None:
        self.n, self.learner, self.game, self.seed = n, learner, game, seed
        self.timeout_s = timeout_s  # selfplay.worker_timeout_s: a worker silent this long hangs

    def tasks(self, games: int, concurrent: int, budget: int,
              gen: int) -> list[tuple[int, int, int, int]]:
        """Each worker's (generation, games, concurrent games, move budget)."""
        n = self.n
        return [(gen, games // n + (rank < games % n), max(1, concurrent // n), -(-budget // n))
                for rank in range(n)]

    def start(self) -> None:
        """Start the workers."""
        raise NotImplementedError

    def placement(self) -> dict[int, str]:
        """Where each worker runs: rank -> node."""
        return dict.fromkeys(range(self.n), socket.gethostname())

    def play(self, games: int, concurrent: int, budget: int, gen: int,
             stats: SearchStats) -> list[GameRecord] | None:
        """The generation's games; None when a stop came first."""
        raise NotImplementedError

    def stopping(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    def close(self) -> None:
        raise NotImplementedError


def _take(item: tuple[str, Any], records: list[GameRecord], stats: SearchStats) -> bool:
    """File a worker's message; whether it was its last of the generation."""
    kind, payload = item[:2]  # a process worker adds its rank
    if kind == "game":
        records.append(payload)
        return False
    stats.leaves += payload[0]
    stats.batches += payload[1]
    return True


class WorkerPool(SelfPlayPool):
    """The workers as OS processes, fed through task queues, games back through one queue."""

    def __init__(self, n: int, game: GoGame, learner: AlphaZero, seed: int,
                 timeout_s: float) -> None:
        super().__init__(n, game, learner, seed, timeout_s)
        self.queues: list[Any] = []
        self.procs: list[Any] = []

    def start(self) -> None:
        ctx = mp.get_context("spawn")
        self.results: Any = ctx.Queue()
        self.queues = [ctx.Queue() for _ in range(self.n)]
        spec, search = worker_spec(self.game, self.learner), vars(self.learner.search)
        self.logs = [worker_log(f"selfplay-{rank}") for rank in range(self.n)]
        procs = [ctx.Process(target=_worker, args=(rank, spec, search, self.seed,
                                                   self.queues[rank], self.results,
                                                   self.logs[rank]),
                             daemon=True) for rank in range(self.n)]
        with starting("spawn"):
            for p in procs:
                p.start()
                self.procs.append(p)  # what close() stops, however far this got

    def play(self, games: int, concurrent: int, budget: int, gen: int,
             stats: SearchStats) -> list[GameRecord] | None:
        weights = plain_state_dict(self.learner.best)
        for q, (gen, share, conc, budget_) in zip(self.queues,
                                                  self.tasks(games, concurrent, budget, gen)):
            q.put((gen, weights, share, conc, budget_))
        records: list[GameRecord] = []
        playing, heard = set(range(self.n)), time.monotonic()
        while playing:
            if self.stopping():
                stop_workers(self.queues, self.procs, timeout=0)
                return None
            try:
                item = self.results.get(timeout=POLL_S)
            except queue.Empty:
                if self.stopping():  # a signal to the whole group ends the workers too
                    continue
                check_alive(self.procs, "self-play worker", logs=self.logs)
                if (silent := time.monotonic() - heard) > self.timeout_s:
                    raise hung("self-play worker", [named(r, self.procs[r], self.logs[r])
                                                    for r in sorted(playing)],
                               silent, "selfplay.worker_timeout_s") from None
                continue
            heard = time.monotonic()
            if item[0] == "error":
                raise RuntimeError(f"self-play worker failed:\n{item[1]}")
            if _take(item, records, stats):
                playing.discard(item[2])
        return records

    def close(self) -> None:
        stop_workers(self.queues, self.procs)


class RayWorkerPool(SelfPlayPool):
    """The workers as Ray actors (`actors=ray`: Ray started here, or the cluster at
    `actors.address`), one CPU each; the weights go out once a generation through Ray's object
    store and each game comes back through it as it ends (a streaming generator)."""

    def __init__(self, n: int, game: GoGame, learner: AlphaZero, seed: int, timeout_s: float,
                 address: str | None) -> None:
        super().__init__(n, game, learner, seed, timeout_s)
        self.address = address
        self.started_ray = False
        self.handles: list[Any] = []

    def start(self) -> None:
        import ray

        self.started_ray = init_ray(self.address, self.n)
        remote = ray.remote(num_cpus=1)(_RaySelfPlayWorker)
        spec, search = worker_spec(self.game, self.learner), vars(self.learner.search)
        logs = [worker_log(f"selfplay-{rank}") for rank in range(self.n)]
        self.handles = [remote.remote(logs[rank], rank, spec, search, self.seed)
                        for rank in range(self.n)]
        self.placed = Placed(self.handles, logs)

    def placement(self) -> dict[int, str]:
        return dict(enumerate(self.placed.nodes))

    def play(self, games: int, concurrent: int, budget: int, gen: int,
             stats: SearchStats) -> list[GameRecord] | None:
        import ray

        weights = ray.put(plain_state_dict(self.learner.best))
        streams = {handle.play.options(num_returns="streaming").remote(
                       gen_, weights, share, conc, budget_): rank
                   for rank, (handle, (gen_, share, conc, budget_))
                   in enumerate(zip(self.handles, self.tasks(games, concurrent, budget, gen)))}
        records: list[GameRecord] = []
        heard = time.monotonic()
        while streams:
            if self.stopping():
                return None  # close() kills the actors
            ready, _ = ray.wait(list(streams), num_returns=1, timeout=POLL_S)
            if not ready and (silent := time.monotonic() - heard) > self.timeout_s:
                raise hung("self-play worker", [f"{rank} ({self.placed.said(rank)})"
                                                for rank in sorted(streams.values())],
                           silent, "selfplay.worker_timeout_s")
            heard = time.monotonic() if ready else heard
            for stream in ready:
                try:
                    ref = next(stream)
                except StopIteration:
                    del streams[stream]
                    continue
                _take(ray.get(ref), records, stats)
        return records

    def close(self) -> None:
        import ray

        for handle in self.handles:
            ray.kill(handle)
        self.handles = []
        if self.started_ray:
            ray.shutdown()
            self.started_ray = False


def plain_state_dict(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The module's state as a plain network loads it: a parametrized weight (precision=qat's
    fake quantization) as the forward pass sees it."""
    out = {}
    for key, value in module.state_dict().items():
        if ".parametrizations." in key:
            prefix, rest = key.split(".parametrizations.")
            name = rest.split(".")[0]
            out[f"{prefix}.{name}"] = getattr(module.get_submodule(prefix), name).detach().cpu()
        else:
            out[key] = value.cpu()
    return out


def _worker(rank: int, spec: dict, search: dict, seed: int, tasks: Any, results: Any,
            log_file: Path | None) -> None:
    """A process worker: a SelfPlayWorker serving its task queue."""
    import traceback

    leave_stops_to_the_job()
    log_to(log_file)
    try:
        worker = SelfPlayWorker(rank, spec, search, seed)
        while (task := tasks.get()) is not None:
            for item in worker.play(*task):
                results.put((*item, rank))
    except Exception:  # the loop reports it
        results.put(("error", traceback.format_exc()))
