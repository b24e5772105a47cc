"""Go games played by a network's search: the network as MCTS's leaf evaluator, self-play
(its searches batched across concurrent games), matches between two players, and the games'
records (result, SGF)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from hetrl.algos.mcts import (
    Node,
    Search,
    SearchConfig,
    SearchStats,
    choose_move,
    inject_noise,
    run_searches,
)
from hetrl.envs.go import GoGame, GoPosition


def evaluator(net: nn.Module, game: GoGame, device: torch.device | str = "cpu"):
    """The network as MCTS's leaf evaluator: priors (softmax) and values from black's side."""
    net.eval()

    def evaluate(positions: Sequence[GoPosition]) -> tuple[np.ndarray, np.ndarray]:
        x = torch.from_numpy(game.features(list(positions))).to(device)
        with torch.inference_mode():
            logits, value = net(x)
        priors = torch.softmax(logits.float(), dim=1).cpu().numpy()
        sides = np.array([p.to_play for p in positions], dtype=np.float32)
        return priors, value.float().cpu().numpy() * sides

    return evaluate


@dataclass
class GameRecord:
    """A finished game: its moves, its result, and the positions it trains on."""

    moves: list[int]
    winner: int  # +1 black, -1 white
    resigned: bool
    planes: np.ndarray  # (T, planes, N, N) uint8: the full-readout positions
    pis: np.ndarray  # (T, N*N+1) float32: visit distributions
    zs: np.ndarray  # (T,) float32: the result for the side to move
    score: float | None = None  # Tromp-Taylor, black minus white (None if resigned)


def result(record: GameRecord) -> str:
    """The game's result as SGF writes it: "B+R" (white resigned), "W+3.5" (by area)."""
    colour = "B" if record.winner == 1 else "W"
    return f"{colour}+R" if record.resigned else f"{colour}+{abs(record.score or 0):g}"


def to_sgf(record: GameRecord, game: GoGame, name: str = "hetrl") -> str:
    """The game as SGF (FF[4]; any Go viewer opens it): Tromp-Taylor rules, komi, result."""
    def point(action: int) -> str:
        if action == game.pass_action:
            return ""
        row, col = divmod(action, game.n)
        return "abcdefghijklmnopqrs"[col] + "abcdefghijklmnopqrs"[game.n - 1 - row]  # top row "a"

    head = (f"(;GM[1]FF[4]CA[UTF-8]AP[hetrl]SZ[{game.n}]KM[{game.komi:g}]RU[Tromp-Taylor]"
            f"PB[{name}]PW[{name}]RE[{result(record)}]")
    moves = "".join(f";{'BW'[i % 2]}[{point(a)}]" for i, a in enumerate(record.moves))
    return head + moves + ")\n"


@dataclass
class _Game:
    pos: GoPosition
    root: Node
    can_resign: bool
    moves: list[int] = field(default_factory=list)
    samples: list[tuple[GoPosition, np.ndarray]] = field(default_factory=list)
    full: bool = False
    resigned_by: int = 0


def play_games(n_games: int, concurrent: int, game: GoGame, evaluate, cfg: SearchConfig,
               rng: np.random.Generator, stats: SearchStats | None = None,
               on_game=None, max_positions: int | None = None,
               stop: Any = None) -> list[GameRecord]:
    """Self-play `n_games` games, `concurrent` at a time, their searches batched together.

    `on_game(record)` is called as each game ends (a worker writes it at once); with
    `max_positions`, no new game starts once that many moves have been played; once `stop`
    (the job's stop request) is set, play ends at the next move batch (the games under way
    are dropped)."""
    records: list[GameRecord] = []
    for record in iter_games(n_games, concurrent, game, evaluate, cfg, rng, stats,
                             max_positions, stop):
        records.append(record)
        if on_game is not None:
            on_game(record)
    return records


def iter_games(n_games: int, concurrent: int, game: GoGame, evaluate, cfg: SearchConfig,
               rng: np.random.Generator, stats: SearchStats | None = None,
               max_positions: int | None = None, stop: Any = None) -> Iterator[GameRecord]:
    """`play_games`, each game yielded as it ends."""
    started, played = 0, 0
    live: list[_Game] = []
    softpicks = cfg.softpicks(game)

    def start() -> _Game:
        pos = game.new_position()
        return _Game(pos, Node(pos), can_resign=rng.random() >= cfg.resign_disable_pct)

    while (live or started < n_games) and not (stop is not None and stop.is_set()):
        while (len(live) < concurrent and started < n_games
               and (max_positions is None or played < max_positions)):
            live.append(start())
            started += 1
        if not live:
            break
        searches = []
        for g in live:
            g.full = rng.random() >= cfg.fastplay_frequency
            readouts = cfg.readouts if g.full else cfg.fast_readouts
            search = Search(g.root, readouts, noise=g.full, rng=rng)
            if g.full and g.root.expanded:
                inject_noise(g.root, cfg, rng)
                search.noise = False
            searches.append(search)
        run_searches(searches, evaluate, cfg, stats)
        still = []
        for g in live:
            root = g.root
            policy = root.search_policy()
            if g.full:
                g.samples.append((g.pos, policy))
            mover_q = root.Q * g.pos.to_play
            if g.can_resign and mover_q < cfg.resign_threshold:
                g.resigned_by = g.pos.to_play
            else:
                action = choose_move(policy, len(g.moves), softpicks, rng)
                child = root.child(action)
                child.parent = None  # the tree below the move is kept
                g.root, g.pos = child, child.pos
                g.moves.append(action)
                played += 1
            if g.resigned_by or g.pos.is_terminal():
                yield _finish(g, game)
            else:
                still.append(g)
        live = still


def _finish(g: _Game, game: GoGame) -> GameRecord:
    winner = -g.resigned_by if g.resigned_by else g.pos.winner()
    positions = [pos for pos, _ in g.samples]
    planes = (game.features(positions).astype(np.uint8) if positions
              else np.zeros((0, game.planes, game.n, game.n), np.uint8))
    pis = (np.stack([pi for _, pi in g.samples]).astype(np.float32) if positions
           else np.zeros((0, game.num_actions), np.float32))
    zs = np.array([winner * pos.to_play for pos in positions], dtype=np.float32)
    score = None if g.resigned_by else g.pos.score()
    return GameRecord(g.moves, winner, bool(g.resigned_by), planes, pis, zs, score)


def match(n_games: int, game: GoGame, black_first, white_first, cfg: SearchConfig,
          rng: np.random.Generator, concurrent: int = 16) -> float:
    """Win rate of player A over `n_games` with colours alternating. A player is an
    evaluator (searched with `cfg.readouts`, no noise; the first `cfg.softpicks` moves of a
    game drawn from the visits, as in self-play, so that two searches do not play one game
    over and over; then greedy), a player with a `move(position)` (`PureMcts`: a pure
    random-rollout MCTS), or None (uniform random)."""
    a, b = black_first, white_first
    wins = 0
    softpicks = cfg.softpicks(game)
    for start in range(0, n_games, concurrent):
        batch = list(range(start, min(n_games, start + concurrent)))
        positions = [game.new_position() for _ in batch]
        a_black = [i % 2 == 0 for i in batch]
        roots = [Node(p) for p in positions]
        while True:
            live = [j for j, p in enumerate(positions) if not p.is_terminal()]
            if not live:
                break
            for player, colour_a in ((a, True), (b, False)):
                mine = [j for j in live if not positions[j].is_terminal()
                        and (positions[j].to_play == 1) == (a_black[j] == colour_a)]
                if not mine:
                    continue
                if player is None:
                    for j in mine:
                        legal = np.flatnonzero(positions[j].legal_mask())
                        positions[j] = positions[j].play(int(rng.choice(legal)))
                    continue
                if hasattr(player, "move"):  # searches on its own, one position at a time
                    for j in mine:
                        positions[j] = positions[j].play(player.move(positions[j]))
                    continue
                searches = [Search(Node(positions[j]), cfg.readouts) for j in mine]
                run_searches(searches, player, cfg)
                for j, s in zip(mine, searches):
                    action = choose_move(s.root.search_policy(), positions[j].moves,
                                         softpicks, rng)
                    positions[j] = positions[j].play(action)
        for j, pos in enumerate(positions):
            winner = pos.winner()
            wins += int((winner == 1) == a_black[j])
        del roots
    return wins / n_games
