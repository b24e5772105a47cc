"""MiniGo's loop (spec C.1.1, C.1.2): self-play with the latest model into a window of the last
W generations, train one generation from the window, gate it against the previous one.

Training is data-parallel over `trainers` ranks (`hetrl.scheduler.dataparallel`: DDP over
gloo, the global batch split evenly) when `trainers` > 1.

Each generation:

1. **Self-play.** `workers` processes (0: this process; with `actors=ray` Ray actors, on a
   local Ray or the cluster at `actors.address`, placement logged as `actors/nodes` and
   `actors/placement.json`; both run `SelfPlayWorker`) each play their share of
   `games_per_generation` games with `best`, `concurrent_games` at a time with their leaf
   evaluations batched (`hetrl.algos.mcts`); each finished game comes back at once and goes
   into the window (C.1.4's "write each game as it ends").
2. **Train** `train_steps` updates on batches drawn uniformly from the window's positions
   (the last `window` generations, `hetrl.replay.window`; MLPerf's W = 5), each one the
   update step every replay-based loop takes (`hetrl.scheduler.updates.Updates`).
3. **Gate.** The trained network plays `best` over `gating_games` games, colours
   alternating; it becomes `best` if it wins at least `gating_win_rate` of them (MLPerf
   0.49; `gating_games: 0` accepts every generation).
4. **Evaluate** `best` against a uniformly random player and against generation 0 (the
   untrained network) over `eval_games` games each, every `eval_every` generations, at
   `eval_readouts` (equal readouts for both sides; no noise, greedy); and, with
   `ladder_games` > 0, against the pure-MCTS ladder: random-rollout MCTS with no network
   (`hetrl.algos.pure_mcts`) at each of `ladder_simulations` simulations a move.

`steps` counts the moves played in self-play; the loop ends after `generations` generations,
once `steps` moves are played (a generation stops starting games when the budget is spent),
or, with `wall_clock_s`, after the generation past which another one (timed as the one just
played, up to its evaluation) would end after `wall_clock_s` seconds of the loop's wall clock
(`selfplay/wall_s`: everything the loop does, logging included, summed over resumes); the
final evaluation runs after that.
Logged per generation (`selfplay/*`): games/s, positions/s, leaf evaluations/s, mean leaf
batch, self-play / train / gating / evaluation seconds, losses, win rates (`win_rate_vs_random`,
`win_rate_vs_gen0`, `win_rate_vs_mcts<S>` for each rung of the ladder); with `trainers` > 1
the all-reduce: `allreduce_s`, the seconds rank 0 had gradients in flight in DDP's all-reduce
(timed by a DDP communication hook, `hetrl.scheduler.dataparallel.AllReduceTimer`), and
`allreduce_mb`, the gradient megabytes all-reduced. One sampled game of each generation as
an SGF (`sgf/generation_NNNN.sgf`) and its final board as a PNG beside it
(`sgf/generation_NNNN.png`: the stones, the last move ringed, the area each side scores).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import queue
import socket
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from hetrl.actors.ray import RayActors, init_ray, ray_node
from hetrl.algos.alphazero import (
    AlphaZero,
    GameRecord,
    PolicyValueNet,
    evaluator,
    iter_games,
    match,
    play_games,
    result,
    to_sgf,
)
from hetrl.algos.mcts import SearchConfig, SearchStats, eval_config
from hetrl.algos.pure_mcts import PureMcts
from hetrl.config.enums import Agents
from hetrl.envs.go import GoGame, area_owner
from hetrl.replay.window import GenerationWindow
from hetrl.runtime import configure_torch
from hetrl.scheduler.context import Training, loop_metrics, report_placement
from hetrl.scheduler.dataparallel import DataParallelTrainers
from hetrl.scheduler.state import LoopState, PhaseTimer, Report
from hetrl.scheduler.updates import Updates
from hetrl.scheduler.workers import stop_workers
from hetrl.tracking.plots import go_board

log = logging.getLogger("hetrl")


class SelfPlayScheduler:
    on_policy = False
    agents = (Agents.game,)
    uses_replay = False  # keeps its own window of generations (validation reads this)
    ray_workers = True  # actors=ray places the workers on Ray (validation reads this)
    episode_returns = False  # plays games: no return_mean_100 to stop at (validation reads this)

    def __init__(self, workers: int, trainers: int, games_per_generation: int,
                 concurrent_games: int, generations: int, window: int, train_steps: int,
                 gating_games: int, gating_win_rate: float, eval_games: int,
                 eval_readouts: int, eval_every: int = 1, ladder_games: int = 0,
                 ladder_simulations: tuple[int, ...] = (),
                 wall_clock_s: float | None = None) -> None:
        self.workers, self.trainers = workers, trainers
        self.games_per_generation = games_per_generation
        self.concurrent_games = concurrent_games
        self.generations, self.window = generations, window
        self.train_steps = train_steps
        self.gating_games, self.gating_win_rate = gating_games, gating_win_rate
        self.eval_games, self.eval_readouts = eval_games, eval_readouts
        self.eval_every = eval_every
        self.ladder_games, self.ladder_simulations = ladder_games, tuple(ladder_simulations)
        self.wall_clock_s = wall_clock_s

    def run(self, t: Training, state: LoopState) -> dict[str, float]:
        learner: AlphaZero = t.learner  # type: ignore[assignment]  # validate() ensures it
        game: GoGame = t.envs.game
        sp = state.__dict__.setdefault("selfplay", {"generation": 0, "window": [],
                                                    "positions": 0})
        if "generation_0" not in sp:  # what "against generation 0" plays
            sp["generation_0"] = plain_state_dict(learner.best)
        gen0 = PolicyValueNet(game.planes, game.n, learner.width, learner.blocks)
        gen0.load_state_dict(sp["generation_0"])
        timer = PhaseTimer(state.phase_s)
        wall_start, wall_before = time.perf_counter(), sp.get("wall_s", 0.0)  # workers included
        rng = np.random.default_rng(t.seed + 1000 * sp["generation"])
        window = GenerationWindow(self.window, rng, sp["window"])  # batches drawn from rng too
        updates = Updates(learner, window, t.precision, state, self.trainers)
        pool: _Pool | None = None
        if isinstance(t.actors, RayActors):  # actors=ray: the workers as Ray actors
            pool = _RayWorkerPool(self.workers, game, learner, t.seed, t.actors.address)
        elif self.workers > 0:
            pool = _WorkerPool(self.workers, game, learner, t.seed)
        trainers = None
        if self.trainers > 1:
            trainers = DataParallelTrainers(self.trainers, learner, t.seed, window)
        metrics: dict[str, float] = {}
        learner_metrics: dict[str, Any] = {}
        try:
            if pool is not None:  # where the workers run, as ActorQ's pool reports it
                report_placement(t, state.step, pool.placement())
            while (sp["generation"] < self.generations and state.step < t.steps
                   and not sp.get("out_of_time")):
                t.stop_if_requested(state)
                gen = sp["generation"]
                generation_start = time.perf_counter()
                stats = SearchStats()
                budget = t.steps - state.step
                start = time.perf_counter()
                with timer("selfplay"):
                    if pool is None:
                        records = play_games(
                            self.games_per_generation, self.concurrent_games, game,
                            evaluator(learner.best, game, learner.device), learner.search, rng,
                            stats, max_positions=budget)
                    else:
                        records = pool.play(self.games_per_generation, self.concurrent_games,
                                            budget, gen, stats)
                selfplay_s = time.perf_counter() - start
                moves = sum(len(r.moves) for r in records)
                state.step += moves
                if records:  # a sampled game, as SGF and its final board as a PNG
                    _log_game(t, records[int(rng.integers(len(records)))], game, gen,
                              learner.generation)
                state.episodes += len(records)
                generation = (gen, *_stack(records, game))
                window.add(generation)
                if trainers is not None:
                    trainers.add_generation(generation)

                start = time.perf_counter()
                learner_metrics = {}
                if len(window) > 0:  # no position yet (no full-readout move): no batch
                    with (trainers.training(self.train_steps) if trainers is not None
                          else nullcontext()):
                        for _ in range(self.train_steps):
                            learner_metrics = updates.step()
                train_s = time.perf_counter() - start
                comm = trainers.comm if trainers is not None else {}

                eval_cfg = eval_config(learner.search, self.eval_readouts)
                start = time.perf_counter()
                with timer("gating"):
                    if self.gating_games > 0:
                        rate = match(self.gating_games, game,
                                     evaluator(learner.net, game, learner.device),
                                     evaluator(learner.best, game, learner.device),
                                     eval_cfg, rng, self.concurrent_games)
                    else:
                        rate = 1.0
                    accepted = rate >= self.gating_win_rate
                    if accepted:
                        learner.accept()
                gating_s = time.perf_counter() - start
                start = time.perf_counter()
                now = time.perf_counter()
                generation_s = now - generation_start  # up to its evaluation
                sp["out_of_time"] = (self.wall_clock_s is not None and wall_before + now
                                     - wall_start + generation_s > self.wall_clock_s)
                last = gen + 1 >= self.generations or state.step >= t.steps or sp["out_of_time"]
                evaluating = (gen + 1) % self.eval_every == 0 or last
                with timer("eval"):
                    if evaluating and self.eval_games > 0:
                        sp["vs_random"] = match(self.eval_games, game,
                                                evaluator(learner.best, game, learner.device),
                                                None, eval_cfg, rng, self.concurrent_games)
                        sp["vs_gen0"] = match(self.eval_games, game,
                                              evaluator(learner.best, game, learner.device),
                                              evaluator(gen0, game), eval_cfg, rng,
                                              self.concurrent_games)
                    if evaluating and self.ladder_games > 0:
                        sp["vs_mcts"] = {
                            sims: match(self.ladder_games, game,
                                        evaluator(learner.best, game, learner.device),
                                        PureMcts(game, sims, t.seed + gen), eval_cfg, rng,
                                        self.concurrent_games)
                            for sims in self.ladder_simulations}
                    vs_random = sp.get("vs_random", float("nan"))
                eval_s = time.perf_counter() - start
                sp["generation"] = gen + 1
                sp["positions"] = len(window)
                metrics = {
                    "selfplay/generation": float(gen + 1),
                    "selfplay/best_generation": float(learner.generation),
                    "selfplay/games": float(len(records)),
                    "selfplay/games_per_s": len(records) / selfplay_s,
                    "selfplay/positions_per_s": moves / selfplay_s,
                    "selfplay/leaf_evals_per_s": stats.leaves / selfplay_s,
                    "selfplay/mean_leaf_batch": stats.mean_batch,
                    "selfplay/selfplay_s": selfplay_s,
                    "selfplay/train_s": train_s,
                    "selfplay/gating_s": gating_s,
                    "selfplay/eval_s": eval_s,
                    "selfplay/gating_win_rate": rate,
                    "selfplay/accepted": float(accepted),
                    "selfplay/win_rate_vs_random": vs_random,
                    "selfplay/win_rate_vs_gen0": sp.get("vs_gen0", float("nan")),
                    "selfplay/window_positions": float(sp["positions"]),
                    "selfplay/black_win_rate": float(np.mean([r.winner == 1 for r in records])),
                    "selfplay/resigned": float(np.mean([r.resigned for r in records])),
                    "selfplay/game_length": moves / max(len(records), 1),
                }
                for sims, rate_vs in sp.get("vs_mcts", {}).items():
                    metrics[f"selfplay/win_rate_vs_mcts{sims}"] = rate_vs
                if comm:  # DDP's gradient all-reduce, timed on rank 0
                    metrics["selfplay/allreduce_s"] = comm["seconds"]
                    metrics["selfplay/allreduce_mb"] = comm["bytes"] / 1e6
                state.history.append((state.step, vs_random))
                state.history_s.append(state.elapsed_s)
                state.elapsed_s += selfplay_s + train_s + gating_s + eval_s
                sp["wall_s"] = wall_before + time.perf_counter() - wall_start
                metrics["selfplay/wall_s"] = sp["wall_s"]
                metrics.update(loop_metrics(state, learner, learner_metrics))
                sp["metrics"] = metrics
                t.report(state.step, metrics, Report.loop)
                log.info("generation %d: %d games, %.1f games/s, %.0f leaf evals/s (batch "
                         "%.1f), black wins %.2f, loss %.3f (value %.3f), train %.1f s%s, "
                         "gating %.2f (%s), vs random %.2f, vs generation 0 %.2f%s", gen + 1,
                         len(records), metrics["selfplay/games_per_s"],
                         metrics["selfplay/leaf_evals_per_s"], stats.mean_batch,
                         metrics["selfplay/black_win_rate"],
                         float(learner_metrics.get("loss", float("nan"))),
                         float(learner_metrics.get("value_loss", float("nan"))), train_s,
                         f" (all-reduce {comm['seconds']:.2f} s)" if comm else "", rate,
                         "accepted" if accepted else "rejected", vs_random,
                         metrics["selfplay/win_rate_vs_gen0"],
                         "".join(f", vs MCTS {sims} {rate_vs:.2f}"
                                 for sims, rate_vs in sp.get("vs_mcts", {}).items()))
                if t.checkpoint_every > 0:
                    t.checkpoint(state)
        finally:
            if pool is not None:
                pool.close()
            if trainers is not None:
                trainers.close()
        return metrics or sp.get("metrics") or loop_metrics(state, learner, learner_metrics)

def _log_game(t: Training, record: GameRecord, game: GoGame, gen: int, player: int) -> None:
    """A game of generation `gen` (played by generation `player`) as the artifacts
    `sgf/generation_NNNN.sgf` and, beside it, `sgf/generation_NNNN.png` (its final board)."""
    if t.log_text is not None:
        t.log_text(to_sgf(record, game, f"generation {player}"), f"sgf/generation_{gen:04d}.sgf")
    if t.log_artifact is not None:
        final = game.position_from(record.moves)
        last = (divmod(final.last, game.n)
                if final.last is not None and final.last != game.pass_action else None)
        title = (f"generation {gen + 1}: {result(record)} (komi {game.komi:g})\n"
                 f"{len(record.moves)} moves, played by generation {player}")
        with tempfile.TemporaryDirectory() as folder:
            t.log_artifact(go_board(final.board, Path(folder) / f"generation_{gen:04d}.png",
                                    title, last=last, owner=area_owner(final.board)), "sgf")


def _stack(records: list[GameRecord], game: GoGame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not records:
        return (np.zeros((0, game.planes, game.n, game.n), np.uint8),
                np.zeros((0, game.num_actions), np.float32), np.zeros(0, np.float32))
    return (np.concatenate([r.planes for r in records]), np.concatenate([r.pis for r in records]),
            np.concatenate([r.zs for r in records]))


def _worker_spec(game: GoGame, learner: AlphaZero) -> dict:
    """What a worker builds its game and network from."""
    return {"board_size": game.n, "komi": game.komi, "history": game.history,
            "liberties": game.liberties, "max_moves": game.max_moves,
            "width": learner.width, "blocks": learner.blocks}


class SelfPlayWorker:
    """What a self-play worker does, wherever it runs (an OS process of `_WorkerPool` or a
    Ray actor of `_RayWorkerPool`): each generation it loads the latest `best` weights, plays
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
        self.net.load_state_dict(weights)
        rng = np.random.default_rng([self.seed, gen, self.rank])
        stats = SearchStats()
        for record in iter_games(n_games, concurrent, self.game, evaluator(self.net, self.game),
                                 self.cfg, rng, stats, max_positions=budget):
            yield "game", record
        yield "done", (stats.leaves, stats.batches)

    def node(self) -> str:
        """The Ray node this worker runs on (asked of Ray actors only)."""
        return ray_node()


class _Pool:
    """Self-play workers that live as long as the loop: each generation they take the latest
    `best` weights and their share of the games, and send each game back as it ends.
    Subclasses run them somewhere (OS processes, Ray actors)."""

    n: int
    learner: AlphaZero

    def tasks(self, games: int, concurrent: int, budget: int,
              gen: int) -> list[tuple[int, int, int, int]]:
        """Each worker's (generation, games, concurrent games, move budget)."""
        n = self.n
        return [(gen, games // n + (rank < games % n), max(1, concurrent // n), -(-budget // n))
                for rank in range(n)]

    def placement(self) -> dict[int, str]:
        """Where each worker runs: rank -> node."""
        return dict.fromkeys(range(self.n), socket.gethostname())

    def play(self, games: int, concurrent: int, budget: int, gen: int,
             stats: SearchStats) -> list[GameRecord]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def _take(item: tuple[str, Any], records: list[GameRecord], stats: SearchStats) -> bool:
    """File a worker's message; whether it was its last of the generation."""
    kind, payload = item
    if kind == "game":
        records.append(payload)
        return False
    stats.leaves += payload[0]
    stats.batches += payload[1]
    return True


class _WorkerPool(_Pool):
    """The workers as OS processes, fed through task queues, games back through one queue."""

    def __init__(self, n: int, game: GoGame, learner: AlphaZero, seed: int) -> None:
        ctx = mp.get_context("spawn")
        self.n, self.learner = n, learner
        self.results: Any = ctx.Queue()
        self.queues = [ctx.Queue() for _ in range(n)]
        spec = _worker_spec(game, learner)
        self.procs = [ctx.Process(target=_worker, args=(rank, spec, vars(learner.search),
                                                        seed, self.queues[rank], self.results),
                                  daemon=True) for rank in range(n)]
        for p in self.procs:
            p.start()

    def play(self, games: int, concurrent: int, budget: int, gen: int,
             stats: SearchStats) -> list[GameRecord]:
        weights = plain_state_dict(self.learner.best)
        for q, (gen, share, conc, budget_) in zip(self.queues,
                                                  self.tasks(games, concurrent, budget, gen)):
            q.put((gen, weights, share, conc, budget_))
        records: list[GameRecord] = []
        done = 0
        while done < self.n:
            try:
                item = self.results.get(timeout=5)
            except queue.Empty:
                if dead := [rank for rank, p in enumerate(self.procs) if not p.is_alive()]:
                    raise RuntimeError(f"self-play workers {dead} died") from None
                continue
            if item[0] == "error":
                raise RuntimeError(f"self-play worker failed:\n{item[1]}")
            done += _take(item, records, stats)
        return records

    def close(self) -> None:
        stop_workers(self.queues, self.procs)


class _RayWorkerPool(_Pool):
    """The workers as Ray actors (`actors=ray`: Ray started here, or the cluster at
    `actors.address`), one CPU each; the weights go out once a generation through Ray's object
    store and each game comes back through it as it ends (a streaming generator)."""

    def __init__(self, n: int, game: GoGame, learner: AlphaZero, seed: int,
                 address: str | None) -> None:
        import ray

        self.n, self.learner = n, learner
        self.started_ray = init_ray(address, n)
        remote = ray.remote(num_cpus=1)(SelfPlayWorker)
        spec = _worker_spec(game, learner)
        self.handles = [remote.remote(rank, spec, vars(learner.search), seed)
                        for rank in range(n)]
        self.nodes = ray.get([handle.node.remote() for handle in self.handles])

    def placement(self) -> dict[int, str]:
        return dict(enumerate(self.nodes))

    def play(self, games: int, concurrent: int, budget: int, gen: int,
             stats: SearchStats) -> list[GameRecord]:
        import ray

        weights = ray.put(plain_state_dict(self.learner.best))
        streams = [handle.play.options(num_returns="streaming").remote(
                       gen_, weights, share, conc, budget_)
                   for handle, (gen_, share, conc, budget_)
                   in zip(self.handles, self.tasks(games, concurrent, budget, gen))]
        records: list[GameRecord] = []
        while streams:
            ready, _ = ray.wait(streams, num_returns=1)
            for stream in ready:
                try:
                    ref = next(stream)
                except StopIteration:
                    streams.remove(stream)
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


def _worker(rank: int, spec: dict, search: dict, seed: int, tasks: Any, results: Any) -> None:
    """A process worker: a SelfPlayWorker serving its task queue."""
    import traceback

    try:
        worker = SelfPlayWorker(rank, spec, search, seed)
        while (task := tasks.get()) is not None:
            for item in worker.play(*task):
                results.put(item)
    except Exception:  # the loop reports it
        results.put(("error", traceback.format_exc()))
