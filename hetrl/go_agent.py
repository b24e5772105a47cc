"""A loaded AlphaZero agent as a Go player: `move(position)` searches the position with the
network and chooses as the job's evaluation does (`hetrl.algos.mcts.choose_move`)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from omegaconf import DictConfig

from hetrl.agent import Agent, rngs_kept
from hetrl.algos.alphazero import AlphaZero
from hetrl.algos.go_games import GameRecord, evaluator
from hetrl.algos.mcts import (Node, Search, choose_move, eval_config, run_searches,
                              search_position)
from hetrl.config.errors import require
from hetrl.envs.go import BLACK, GoGame, GoPosition, GoVectorEnv
from hetrl.evaluation import FINAL_SEED_OFFSET

Opponent = Callable[[GoPosition], int]
"""A player: the move it plays in a position (not terminal)."""


class GoAgent(Agent):
    """`Agent` plus Go: `move`, `search`, games against another player (`play`), and
    `evaluate` as games against a uniformly random player."""

    def __init__(self, config: DictConfig, learner: AlphaZero,
                 make_env: Callable[[], GoVectorEnv], env: GoVectorEnv, **options: Any) -> None:
        super().__init__(config, learner, make_env, env, **options)
        self.game: GoGame = env.game
        learner = self.learner
        readouts = self.config.get("scheduler", {}).get("eval_readouts") or learner.search.readouts
        self.search_config = eval_config(learner.search, int(readouts))
        self.softpicks = self.search_config.softpicks(self.game)
        self.rng = np.random.default_rng(self.config.seed + FINAL_SEED_OFFSET)
        self._leaves = evaluator(self._copy or learner.policy(), self.game, learner.device)

    def search(self, position: GoPosition, readouts: int | None = None) -> Node:
        """The searched root of `position` (its visits in `child_N`, its value in `Q`)."""
        return search_position(position, self._leaves, self.search_config, readouts)

    def extend(self, root: Node, readouts: int) -> None:
        """`readouts` more readouts of a searched root (a search against the clock)."""
        run_searches([Search(root, readouts)], self._leaves, self.search_config)

    def choose(self, root: Node, position: GoPosition,
               rng: np.random.Generator | None = None) -> int:
        """The move of a searched `position`: its visits drawn from for a game's first moves,
        then the most visited (the job's evaluation rule, `choose_move`)."""
        return choose_move(root.search_policy(), position.moves, self.softpicks, rng or self.rng)

    def move(self, position: GoPosition, readouts: int | None = None,
             rng: np.random.Generator | None = None) -> int:
        """The move the agent plays in `position` (not terminal)."""
        require(not position.is_terminal(), "position", "a finished game", "positions to move in")
        return self.choose(self.search(position, readouts), position, rng)

    def play(self, opponent: Opponent, black: bool, rng: np.random.Generator,
             game: GoGame | None = None) -> GameRecord:
        """One game against `opponent`, the agent black or white, from the empty board."""
        game = game or self.game
        pos, moves = game.new_position(), []
        while not pos.is_terminal():
            mine = (pos.to_play == BLACK) == black
            action = self.move(pos, rng=rng) if mine else opponent(pos)
            moves.append(action)
            pos = pos.play(action)
        return record(moves, pos, game)

    def games(self, episodes: int, seed: int | None = None) -> list[tuple[bool, GameRecord]]:
        """`episodes` games against a uniformly random player, colours alternating (black
        first), drawn from `seed` (by default the job's seed + FINAL_SEED_OFFSET)."""
        require(episodes >= 1, "episodes", episodes, "integers >= 1")
        rng = np.random.default_rng(self.config.seed + FINAL_SEED_OFFSET if seed is None
                                    else seed)

        def uniform(pos: GoPosition) -> int:
            return int(rng.choice(np.flatnonzero(pos.legal_mask())))

        with rngs_kept():
            return [(i % 2 == 0, self.play(uniform, i % 2 == 0, rng)) for i in range(episodes)]

    def evaluate(self, episodes: int = 10, seed: int | None = None) -> np.ndarray:
        """+1 for each game won against a uniformly random player, -1 for each lost."""
        return np.array([1.0 if (r.winner == BLACK) == black else -1.0
                         for black, r in self.games(episodes, seed)])


def record(moves: list[int], final: GoPosition, game: GoGame) -> GameRecord:
    """A played game as self-play records one (no training positions)."""
    return GameRecord(moves, final.winner(), False,
                      np.zeros((0, game.planes, game.n, game.n), np.uint8),
                      np.zeros((0, game.num_actions), np.float32), np.zeros(0, np.float32),
                      final.score())
