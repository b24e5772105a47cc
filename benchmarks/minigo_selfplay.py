"""MiniGo self-play throughput on this host, and the MiniGo machine's modeled scaling.

Five tables:

1. **Rules engine**, µs per move of random play (legal moves + play): OpenSpiel's C++ Go
   (what `env=go*` uses) against MiniGo's pure-Python `go.py` as PettingZoo's `go_v5` ships it
   (19×19 only: its board size is a module constant).
2. **MCTS leaf evaluations/s** with a width-32 × 3-block network on 9×9, one process, torch at
   1 thread: leaves batched across `concurrent` games (MiniGo's concurrent games, KataGo's
   network server) against one game at a time, one leaf per network call (the
   OpenSpiel-Python / muzero-general design of one game per process).
3. **Self-play games/s**, moves/s and leaf evaluations/s with 1 and 2 worker processes
   (`selfplay.workers`): the second row is the 2 cores' rate.
4. **Training positions/s** of the data-parallel trainers (`selfplay.trainers`, DDP over
   gloo, the global batch split over the ranks) on random 9×9 positions: 1 rank at 1 torch
   thread, 1 rank at 2 threads (what the same two cores give inside one process) and 2 ranks
   at 1 thread each, with the scaling efficiency E = rate_2 / (2 · rate_1) (spec C.1.8's E(P)
   at P = 2) and rank 0's all-reduce seconds per step.
5. **E(P)** of the MiniGo machine model (`hetrl.platform.minigo_cluster`) at the paper's
   1067 / 2091 / 4139 / 8235 nodes, from Table 6's times (plain formula) and from the model,
   beside Table 7.

    python benchmarks/minigo_selfplay.py            # ~2 minutes on 2 idle cores
    python benchmarks/minigo_selfplay.py --smoke    # seconds
"""

from __future__ import annotations

import argparse
import time
from contextlib import nullcontext
from typing import NamedTuple

import numpy as np
import torch
from common import host_line, parse_args, table, write_results

from hetrl.algos.alphazero import PolicyValueNet, make_learner
from hetrl.algos.go_games import evaluator
from hetrl.algos.mcts import Node, Search, SearchConfig, SearchStats, run_searches
from hetrl.envs.go import GoGame
from hetrl.platform.minigo_cluster import (
    TABLE_6,
    TABLE_7_EFFICIENCY,
    MiniGoCluster,
    scaling_efficiency,
    scaling_efficiency_iter_norm,
)
from hetrl.precision.uniform import UniformPrecision
from hetrl.replay.window import GenerationWindow
from hetrl.scheduler.dataparallel import DataParallelTrainers
from hetrl.scheduler.state import LoopState
from hetrl.scheduler.updates import Updates


class Sizes(NamedTuple):
    """How much each table measures."""

    engine_games: tuple[int, int, int]  # random games: OpenSpiel 9x9, 19x19, MiniGo's go.py
    width: int  # the network's, and its residual blocks
    blocks: int
    readouts: int  # a leaf-rate search's (self-play searches half as many)
    concurrent: int  # games whose leaves are batched together
    rounds: tuple[int, int]  # of the batched and of the one-game leaf rate
    workers: tuple[int, ...]  # self-play worker processes, a row each
    games: int  # self-play games a row
    batch: int  # the global training batch and its steps
    steps: int
    ranks_threads: tuple[tuple[int, int], ...]  # training rows; (1, 1) and (2, 1) give E


FULL = Sizes((200, 50, 10), 32, 3, 64, 32, (2, 16), (1, 2), 32, 256, 30,
             ((1, 1), (1, 2), (2, 1)))
SMOKE = Sizes((1, 1, 1), 4, 1, 4, 2, (1, 1), (1,), 1, 8, 1, ((1, 1), (2, 1)))


def openspiel_us_per_move(board_size: int, games: int, rng: np.random.Generator) -> float:
    import pyspiel

    game = pyspiel.load_game("go", {"board_size": board_size, "komi": 7.5})
    moves, start = 0, time.perf_counter()
    for _ in range(games):
        state = game.new_initial_state()
        while not state.is_terminal():
            legal = state.legal_actions()
            state.apply_action(legal[rng.integers(len(legal))])
            moves += 1
    return 1e6 * (time.perf_counter() - start) / moves


def minigo_python_us_per_move(games: int, rng: np.random.Generator) -> float:
    from pettingzoo.classic.go import go_base as go

    moves, start = 0, time.perf_counter()
    for _ in range(games):
        pos = go.Position(komi=7.5)
        while not pos.is_game_over() and pos.n < 2 * go.N * go.N:
            legal = np.flatnonzero(pos.all_legal_moves())
            pos = pos.play_move(go.coords.from_flat(int(legal[rng.integers(len(legal))])))
            moves += 1
    return 1e6 * (time.perf_counter() - start) / moves


def leaf_rate(game: GoGame, net: torch.nn.Module, concurrent: int, virtual_losses: int,
              readouts: int, rounds: int) -> tuple[float, float]:
    """Leaf evaluations/s and mean batch: `concurrent` fresh positions searched together,
    `rounds` times (each a few moves into a game so the trees are not trivial)."""
    cfg = SearchConfig(virtual_losses=virtual_losses)
    evaluate = evaluator(net, game)
    rng = np.random.default_rng(0)
    stats = SearchStats()
    start = time.perf_counter()
    for _ in range(rounds):
        roots = []
        for _ in range(concurrent):
            pos = game.new_position()
            for _ in range(4):
                pos = pos.play(int(rng.choice(np.flatnonzero(pos.legal_mask()[:-1]))))
            roots.append(Node(pos))
        run_searches([Search(r, readouts) for r in roots], evaluate, cfg, stats)
    return stats.leaves / (time.perf_counter() - start), stats.mean_batch


def games_per_s(workers: int, game: GoGame, width: int, blocks: int, games: int,
                readouts: int) -> tuple[float, float, float]:
    """Self-play games/s, moves/s and MCTS leaf evaluations/s through the loop's worker pool
    (`workers` processes, all their cores); a random network's games vary in length, so
    moves/s is the steadier figure."""
    from hetrl.actors.selfplay import WorkerPool
    from hetrl.options import option_yaml

    class _Learner:  # what the pool reads of a learner
        def __init__(self) -> None:
            self.best = PolicyValueNet(game.planes, game.n, width, blocks)
            self.width, self.blocks = width, blocks
            self.search = SearchConfig(readouts=readouts, fast_readouts=max(1, readouts // 4))

    timeout_s = option_yaml("scheduler", "selfplay").worker_timeout_s
    pool = WorkerPool(workers, game, _Learner(), 0, timeout_s)  # type: ignore[arg-type]
    try:
        pool.start()
        pool.play(workers, 1, 10**9, 0, SearchStats())  # warm up: processes started
        stats = SearchStats()
        start = time.perf_counter()
        records = pool.play(games, games, 10**9, 1, stats)  # all at once, each worker
        seconds = time.perf_counter() - start
        return (len(records) / seconds, sum(len(r.moves) for r in records) / seconds,
                stats.leaves / seconds)
    finally:
        pool.close()


def training_rate(ranks: int, threads: int, game: GoGame, width: int, blocks: int,
                  batch: int, steps: int) -> tuple[float, float]:
    """Training positions/s of `ranks` data-parallel ranks (rank 0 here at `threads` torch
    threads, the others at 1) through the loop's own update step on a window of random
    positions, and rank 0's all-reduce seconds per step (0 for one rank)."""
    rng = np.random.default_rng(0)
    positions = 4 * batch
    planes = (rng.random((positions, game.planes, game.n, game.n)) > 0.5).astype(np.uint8)
    pis = rng.dirichlet(np.ones(game.num_actions), positions).astype(np.float32)
    window = GenerationWindow(1, rng, [(0, planes, pis,
                                        rng.choice([-1.0, 1.0], positions).astype(np.float32))])
    learner = make_learner((game.planes, game.n, game.n), game.num_actions, width=width,
                           blocks=blocks, batch_size=batch, lr_values=[0.01], lr_boundaries=[],
                           momentum=0.9, l2=1e-4, value_weight=0.5, search={})
    updates = Updates(learner, window, UniformPrecision("float32", None), LoopState(), ranks)
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    trainers = DataParallelTrainers(ranks, learner, 0, window) if ranks > 1 else None

    def train(n: int) -> None:
        with trainers.training(n) if trainers is not None else nullcontext():
            for _ in range(n):
                updates.step()

    try:
        train(2)  # warm up (and the ranks have started)
        start = time.perf_counter()
        train(steps)
        seconds = time.perf_counter() - start
        allreduce = trainers.comm.get("seconds", 0.0) / steps if trainers is not None else 0.0
        return steps * batch / seconds, allreduce
    finally:
        if trainers is not None:
            trainers.close()
        torch.set_num_threads(saved)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds")
    args = parse_args(parser)
    size = SMOKE if args.smoke else FULL
    print(host_line("numpy"))
    rng = np.random.default_rng(0)

    go9, go19, minigo = size.engine_games
    rows = [("OpenSpiel C++ (env=go*)", "9x9", f"{openspiel_us_per_move(9, go9, rng):.1f}"),
            ("OpenSpiel C++", "19x19", f"{openspiel_us_per_move(19, go19, rng):.1f}"),
            ("MiniGo go.py (PettingZoo go_v5)", "19x19",
             f"{minigo_python_us_per_move(minigo, rng):.1f}")]
    table(["engine", "board", "µs / move"], rows, "Rules engine: random play, legal moves + play",
          "llr")

    torch.set_num_threads(1)
    game = GoGame(9)
    torch.manual_seed(0)
    width, blocks, readouts, concurrent = size.width, size.blocks, size.readouts, size.concurrent
    net = PolicyValueNet(game.planes, 9, width, blocks)
    batched, batch = leaf_rate(game, net, concurrent, 4, readouts, size.rounds[0])
    single, single_batch = leaf_rate(game, net, 1, 1, readouts, size.rounds[1])
    table(["design", "mean leaf batch", "leaf evals / s"],
          [(f"{concurrent} games, 4 virtual losses each", f"{batch:.1f}", f"{batched:.0f}"),
           ("one game, one leaf a call", f"{single_batch:.1f}", f"{single:.0f}"),
           ("ratio", "", f"{batched / single:.2f}x")],
          f"MCTS leaf evaluations, 9x9, width {width} x {blocks} blocks, 1 torch thread", "lrr")

    rows = []
    for workers in size.workers:
        games, moves, leaves = games_per_s(workers, game, width, blocks, size.games,
                                           readouts // 2)
        rows.append((workers, f"{games:.2f}", f"{moves:.0f}", f"{leaves:,.0f}"))
    table(["workers", "games / s", "moves / s", "leaf evals / s"], rows,
          f"Self-play, 9x9, {readouts // 2} readouts, width {width} x {blocks}", "rrrr")

    rates = {(r, t): training_rate(r, t, game, width, blocks, size.batch, size.steps)
             for r, t in size.ranks_threads}
    rows = [(f"{r} x {t} thread{'s' if t > 1 else ''}", f"{rate:,.0f}", f"{comm * 1000:.2f}")
            for (r, t), (rate, comm) in rates.items()]
    rows.append(("E = rate(2 ranks) / (2 x rate(1 rank, 1 thread))", "",
                 f"{rates[(2, 1)][0] / (2 * rates[(1, 1)][0]):.1%}"))
    table(["ranks x torch threads", "positions / s", "all-reduce ms / step"], rows,
          f"Data-parallel training, 9x9, width {width} x {blocks}, global batch {size.batch}, "
          f"{size.steps} steps", "lrr")

    n_sp = sorted(TABLE_6)
    nodes = [43 + n for n in n_sp]
    paper_times = [TABLE_6[n][1] for n in n_sp]
    plain = scaling_efficiency(paper_times, nodes)
    iter_norm = scaling_efficiency_iter_norm(paper_times, nodes, [TABLE_6[n][0] for n in n_sp])
    cluster = MiniGoCluster()
    modeled = scaling_efficiency([cluster.time_s(n) for n in n_sp], nodes)
    table(["nodes", "Table 7 E", "E(P) from Table 6", "iteration-normalized", "model time (s)",
           "model E(P)"],
          [(p, f"{100 * TABLE_7_EFFICIENCY[p]:.1f}%", f"{100 * e:.1f}%", f"{100 * i:.1f}%",
            f"{cluster.time_s(n):,.0f}", f"{100 * m:.1f}%")
           for p, n, e, i, m in zip(nodes, n_sp, plain, iter_norm, modeled)],
          "MiniGo machine: scaling efficiency E(P) = (T_base/T_P)/(P/P_base)", "rrrrrr")


if __name__ == "__main__":
    main()
    write_results()
