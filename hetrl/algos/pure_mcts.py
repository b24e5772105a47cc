"""Pure MCTS: a Go player with no network, the rungs of the ladder a generation is measured on.

OpenSpiel's MCTS with random rollouts: UCT selection (`uct_c`), each simulation expanding one
node and scoring it by one random playout to the end of the game, MCTS-Solver backups, the
most-visited move played. It is the algorithm of `open_spiel.python.algorithms.mcts.MCTSBot`
with `RandomRolloutEvaluator`, run by OpenSpiel's C++ implementation of it
(`pyspiel.MCTSBot`, `pyspiel.RandomRolloutEvaluator`): measured on 9×9, 12 ms a move at
100 simulations against 98 ms for the Python one, 140 ms at 1,000.

The search sees OpenSpiel's rules, which allow a move that repeats an earlier whole-board
position; the game here forbids it (positional superko, `hetrl.envs.go`), so such a move is
passed over for the most-visited legal one.
"""

from __future__ import annotations

import pyspiel

from hetrl.envs.go import GoGame, GoPosition

UCT_C = 2.0  # OpenSpiel's examples/mcts.py
MAX_MEMORY_MB = 1000  # the tree's cap (OpenSpiel's default in examples/mcts.py)


class PureMcts:
    """A random-rollout MCTS player at `simulations` simulations a move."""

    def __init__(self, game: GoGame, simulations: int, seed: int, rollouts: int = 1) -> None:
        self.simulations = simulations
        self.bot = pyspiel.MCTSBot(game.spiel, pyspiel.RandomRolloutEvaluator(rollouts, seed),
                                   UCT_C, simulations, MAX_MEMORY_MB, True, seed, False)

    def move(self, pos: GoPosition) -> int:
        """The search's move in `pos` (not terminal)."""
        root = self.bot.mcts_search(pos.state)
        best = root.best_child().action
        legal = pos.legal_mask()
        if legal[best]:
            return int(best)
        visits = [(child.explore_count, child.action) for child in root.children
                  if legal[child.action]]
        return int(max(visits)[1])

    def __repr__(self) -> str:
        return f"PureMcts({self.simulations} simulations)"

