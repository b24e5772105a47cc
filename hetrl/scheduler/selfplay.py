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
   update step every replay-based loop takes (`hetrl.scheduler.updates.Updates`), reading
   its batches through `hetrl.replay.loader.WindowLoader`: the next batch is copied out of
   the window on a thread while the current one trains.
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
import math
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from hetrl.actors.selfplay import SelfPlayPool, plain_state_dict, selfplay_pool
from hetrl.algos.alphazero import AlphaZero, PolicyValueNet
from hetrl.algos.go_games import GameRecord, evaluator, match, play_games
from hetrl.algos.mcts import SearchConfig, SearchStats, eval_config
from hetrl.algos.pure_mcts import PureMcts
from hetrl.config.enums import Agents
from hetrl.envs.go import GoGame
from hetrl.replay.loader import WindowLoader
from hetrl.replay.window import Generation, GenerationWindow
from hetrl.scheduler.base import LoopNeeds
from hetrl.scheduler.boundary import loop_metrics, report_placement
from hetrl.scheduler.context import Training
from hetrl.scheduler.dataparallel import DataParallelTrainers
from hetrl.scheduler.state import LoopState, Report
from hetrl.scheduler.updates import Updates
from hetrl.timing import PhaseTimer

log = logging.getLogger("hetrl")


@dataclass
class SelfPlayProgress:
    """The loop's own progress, checkpointed with its LoopState (`LoopState.progress`)."""

    generation: int = 0  # generations played so far
    window: list[Generation] = field(default_factory=list)  # the window's generations
    positions: int = 0  # positions in the window
    generation_0: dict[str, torch.Tensor] | None = None  # what "against generation 0" plays
    wall_s: float = 0.0  # the loop's wall clock, summed over resumes
    out_of_time: bool = False  # another generation would end past wall_clock_s
    vs_random: float = math.nan  # the last evaluation's win rates
    vs_gen0: float = math.nan
    vs_mcts: dict[int, float] = field(default_factory=dict)  # rung (simulations) -> win rate
    metrics: dict[str, float] = field(default_factory=dict)  # the last generation's


@dataclass
class GenerationLog:
    """What one generation did, phase by phase, as its log line and metrics tell it."""

    gen: int
    records: list[GameRecord] = field(default_factory=list)
    stats: SearchStats = field(default_factory=SearchStats)
    selfplay_s: float = 0.0
    learner_metrics: dict[str, Any] = field(default_factory=dict)
    train_s: float = 0.0
    comm: dict[str, float] = field(default_factory=dict)  # the all-reduce, with trainers > 1
    gating_rate: float = 1.0
    accepted: bool = True
    gating_s: float = 0.0
    eval_s: float = 0.0

    @property
    def moves(self) -> int:
        return sum(len(r.moves) for r in self.records)


class SelfPlayScheduler:
    # keeps its own window of generations; plays games: no return_mean_100 to stop at
    needs = LoopNeeds(agents=(Agents.game,), replay=False, ray_workers="selfplay.workers",
                      workers=selfplay_pool, trainer_ranks="selfplay.trainers",
                      episode_returns=False)

    def __init__(self, workers: int, trainers: int, games_per_generation: int,
                 concurrent_games: int, generations: int, window: int, train_steps: int,
                 gating_games: int, gating_win_rate: float, eval_games: int,
                 eval_readouts: int, eval_every: int, ladder_games: int,
                 ladder_simulations: tuple[int, ...], wall_clock_s: float | None,
                 worker_timeout_s: float) -> None:
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
        self.worker_timeout_s = worker_timeout_s

    def run(self, t: Training, state: LoopState) -> dict[str, float]:
        generations = Generations(self, t, state)
        try:
            generations.start()
            while generations.going():
                t.stop_if_requested(state)
                generations.step()
        finally:
            generations.close()
        return generations.results()


class Generations:
    """One run of the loop: its parts (the window, the update step, the worker pool, the
    trainer ranks) and progress, and a generation's phases as methods: `play`, `train`,
    `gate`, `evaluate`, `log`."""

    def __init__(self, cfg: SelfPlayScheduler, t: Training, state: LoopState) -> None:
        self.cfg, self.t, self.state = cfg, t, state
        self.learner = learner = t.learner_as(AlphaZero)
        self.game: GoGame = t.envs.game
        if state.progress is None:
            state.progress = SelfPlayProgress(generation_0=plain_state_dict(learner.best))
        self.progress: SelfPlayProgress = state.progress
        self.gen0 = PolicyValueNet(self.game.planes, self.game.n, learner.width, learner.blocks)
        self.gen0.load_state_dict(self.progress.generation_0)
        self.timer = PhaseTimer(state.phase_s)
        self.wall_start, self.wall_before = time.perf_counter(), self.progress.wall_s
        self.rng = np.random.default_rng(t.seed + 1000 * self.progress.generation)
        # batches are drawn from the loop's generator too
        self.window = GenerationWindow(cfg.window, self.rng, self.progress.window)
        self.loader = WindowLoader(self.window)  # what the update step reads, a batch ahead
        self.updates = Updates(learner, self.loader, t.precision, state, cfg.trainers)
        self.pool = t.workers_as(SelfPlayPool)  # build()'s; None: games played here
        self.trainers: DataParallelTrainers | None = None
        self.metrics: dict[str, float] = {}
        self.learner_metrics: dict[str, Any] = {}

    def start(self) -> None:
        """The worker pool (its placement logged, as ActorQ's pool's is), then the trainer
        ranks; `close` stops what started, however far this got."""
        cfg, t = self.cfg, self.t
        if self.pool is not None:
            self.pool.stop = t.stop
            self.pool.start()
            report_placement(t, self.state.step, self.pool.placement())
        if cfg.trainers > 1:
            self.trainers = DataParallelTrainers(cfg.trainers, self.learner, t.seed,
                                                 self.window)

    def going(self) -> bool:
        """Generations, moves and wall clock left."""
        return (self.progress.generation < self.cfg.generations
                and self.state.step < self.t.steps and not self.progress.out_of_time)

    def step(self) -> None:
        """One generation: play, train, gate, evaluate, log."""
        g = GenerationLog(self.progress.generation)
        started = time.perf_counter()
        self.play(g)
        self.train(g)
        self.gate(g)
        self.evaluate(g, started)
        self.log(g)
        if self.t.checkpoint_every > 0:
            self.t.checkpoint(self.state)

    def play(self, g: GenerationLog) -> None:
        """Self-play `games_per_generation` games with `best` (within the move budget) into
        the window; one of them is logged as SGF and a picture."""
        cfg, learner, game, state = self.cfg, self.learner, self.game, self.state
        budget = self.t.steps - state.step
        start = time.perf_counter()
        with self.timer("selfplay"):
            if self.pool is None:
                records = play_games(
                    cfg.games_per_generation, cfg.concurrent_games, game,
                    evaluator(learner.best, game, learner.device), learner.search, self.rng,
                    g.stats, max_positions=budget, stop=self.t.stop)
            else:
                records = self.pool.play(cfg.games_per_generation, cfg.concurrent_games,
                                         budget, g.gen, g.stats)
        if records is None or self.t.stop.is_set():  # the generation is played again on resume
            self.t.stop_if_requested(state)
        g.records = records or []
        g.selfplay_s = time.perf_counter() - start
        state.step += g.moves
        if g.records and self.t.log_game is not None:  # a sampled game, as SGF and picture
            self.t.log_game(g.records[int(self.rng.integers(len(g.records)))], game, g.gen,
                            learner.generation)
        state.episodes += len(g.records)
        generation = (g.gen, *_stack(g.records, game))
        self.window.add(generation)
        if self.trainers is not None:
            self.trainers.add_generation(generation)

    def train(self, g: GenerationLog) -> None:
        """`train_steps` updates on batches of the window, each read while the one before
        it trains (on every trainer rank)."""
        start = time.perf_counter()
        steps = self.cfg.train_steps
        if len(self.window) > 0:  # no position yet (no full-readout move): no batch
            with (self.trainers.training(steps) if self.trainers is not None
                  else nullcontext()), self.loader.reading(steps):
                for _ in range(steps):
                    g.learner_metrics = self.updates.step()
        g.train_s = time.perf_counter() - start
        g.comm = self.trainers.comm if self.trainers is not None else {}
        self.learner_metrics = g.learner_metrics

    def gate(self, g: GenerationLog) -> None:
        """The trained network against `best`: it becomes `best` at `gating_win_rate`."""
        cfg, learner, game = self.cfg, self.learner, self.game
        start = time.perf_counter()
        with self.timer("gating"):
            if cfg.gating_games > 0:
                g.gating_rate = match(cfg.gating_games, game,
                                      evaluator(learner.net, game, learner.device),
                                      evaluator(learner.best, game, learner.device),
                                      self._eval_search(), self.rng, cfg.concurrent_games)
            g.accepted = g.gating_rate >= cfg.gating_win_rate
            if g.accepted:
                learner.accept()
        g.gating_s = time.perf_counter() - start

    def evaluate(self, g: GenerationLog, started: float) -> None:
        """`best` against a random player, generation 0 and the pure-MCTS ladder, every
        `eval_every` generations and at the last one (which the wall clock may make this)."""
        cfg, learner, game, p = self.cfg, self.learner, self.game, self.progress
        now = time.perf_counter()
        generation_s = now - started  # up to its evaluation
        p.out_of_time = (cfg.wall_clock_s is not None and self.wall_before + now
                         - self.wall_start + generation_s > cfg.wall_clock_s)
        last = (g.gen + 1 >= cfg.generations or self.state.step >= self.t.steps
                or p.out_of_time)
        evaluating = (g.gen + 1) % cfg.eval_every == 0 or last
        search = self._eval_search()
        with self.timer("eval"):
            if evaluating and cfg.eval_games > 0:
                best = evaluator(learner.best, game, learner.device)
                p.vs_random = match(cfg.eval_games, game, best, None, search, self.rng,
                                    cfg.concurrent_games)
                p.vs_gen0 = match(cfg.eval_games, game, best, evaluator(self.gen0, game),
                                  search, self.rng, cfg.concurrent_games)
            if evaluating and cfg.ladder_games > 0:
                p.vs_mcts = {sims: match(cfg.ladder_games, game,
                                         evaluator(learner.best, game, learner.device),
                                         PureMcts(game, sims, self.t.seed + g.gen), search,
                                         self.rng, cfg.concurrent_games)
                             for sims in cfg.ladder_simulations}
        g.eval_s = time.perf_counter() - now

    def log(self, g: GenerationLog) -> None:
        """The generation's metrics (`selfplay/*` and the loop's), reported and logged."""
        state, p = self.state, self.progress
        p.generation = g.gen + 1
        p.positions = len(self.window)
        metrics = _generation_metrics(g, p, self.learner)
        state.history.append((state.step, p.vs_random))
        state.history_s.append(state.elapsed_s)
        state.elapsed_s += g.selfplay_s + g.train_s + g.gating_s + g.eval_s
        p.wall_s = self.wall_before + time.perf_counter() - self.wall_start
        metrics["selfplay/wall_s"] = p.wall_s
        metrics.update(loop_metrics(state, self.learner, g.learner_metrics))
        self.metrics = p.metrics = metrics
        self.t.report(state.step, metrics, Report.loop)
        log.info("generation %d: %d games, %.1f games/s, %.0f leaf evals/s (batch %.1f), "
                 "black wins %.2f, loss %.3f (value %.3f), train %.1f s%s, gating %.2f (%s), "
                 "vs random %.2f, vs generation 0 %.2f%s", g.gen + 1, len(g.records),
                 metrics["selfplay/games_per_s"], metrics["selfplay/leaf_evals_per_s"],
                 g.stats.mean_batch, metrics["selfplay/black_win_rate"],
                 float(g.learner_metrics.get("loss", math.nan)),
                 float(g.learner_metrics.get("value_loss", math.nan)), g.train_s,
                 f" (all-reduce {g.comm['seconds']:.2f} s)" if g.comm else "", g.gating_rate,
                 "accepted" if g.accepted else "rejected", p.vs_random, p.vs_gen0,
                 "".join(f", vs MCTS {sims} {rate:.2f}" for sims, rate in p.vs_mcts.items()))

    def results(self) -> dict[str, float]:
        """The last generation's metrics (this run's, or the checkpoint's)."""
        return (self.metrics or self.progress.metrics
                or loop_metrics(self.state, self.learner, self.learner_metrics))

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        if self.trainers is not None:
            self.trainers.close()

    def _eval_search(self) -> SearchConfig:
        """The search of gating and evaluation: `eval_readouts` readouts a move."""
        return eval_config(self.learner.search, self.cfg.eval_readouts)


def _generation_metrics(g: GenerationLog, p: SelfPlayProgress,
                        learner: AlphaZero) -> dict[str, float]:
    """A generation's `selfplay/*` figures."""
    records, moves = g.records, g.moves
    metrics = {
        "selfplay/generation": float(g.gen + 1),
        "selfplay/best_generation": float(learner.generation),
        "selfplay/games": float(len(records)),
        "selfplay/games_per_s": len(records) / g.selfplay_s,
        "selfplay/positions_per_s": moves / g.selfplay_s,
        "selfplay/leaf_evals_per_s": g.stats.leaves / g.selfplay_s,
        "selfplay/mean_leaf_batch": g.stats.mean_batch,
        "selfplay/selfplay_s": g.selfplay_s,
        "selfplay/train_s": g.train_s,
        "selfplay/gating_s": g.gating_s,
        "selfplay/eval_s": g.eval_s,
        "selfplay/gating_win_rate": g.gating_rate,
        "selfplay/accepted": float(g.accepted),
        "selfplay/win_rate_vs_random": p.vs_random,
        "selfplay/win_rate_vs_gen0": p.vs_gen0,
        "selfplay/window_positions": float(p.positions),
        "selfplay/black_win_rate": float(np.mean([r.winner == 1 for r in records])),
        "selfplay/resigned": float(np.mean([r.resigned for r in records])),
        "selfplay/game_length": moves / max(len(records), 1),
    }
    for sims, rate in p.vs_mcts.items():
        metrics[f"selfplay/win_rate_vs_mcts{sims}"] = rate
    if g.comm:  # DDP's gradient all-reduce, timed on rank 0
        metrics["selfplay/allreduce_s"] = g.comm["seconds"]
        metrics["selfplay/allreduce_mb"] = g.comm["bytes"] / 1e6
    return metrics


def _stack(records: list[GameRecord], game: GoGame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not records:
        return (np.zeros((0, game.planes, game.n, game.n), np.uint8),
                np.zeros((0, game.num_actions), np.float32), np.zeros(0, np.float32))
    return (np.concatenate([r.planes for r in records]), np.concatenate([r.pis for r in records]),
            np.concatenate([r.zs for r in records]))
