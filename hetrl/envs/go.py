"""Go on OpenSpiel's C++ rules engine, with MiniGo's rules and input planes.

OpenSpiel's `go` plays a move in ≈5 µs on 9×9 (clone ≈1 µs); MiniGo's pure-Python `go.py`
(PettingZoo's `go_v5`) ≈60 µs on 19×19 (`benchmarks/minigo_selfplay.py` measures both), so
self-play is bound by the network, not the rules. What OpenSpiel leaves to us:

* **Positional superko.** OpenSpiel forbids suicide and simple ko, and ends the game as a
  draw when a whole-board position repeats. Here a move that repeats an earlier position of
  the game is illegal (positional superko, as MiniGo and Tromp-Taylor): `legal_mask()` leaves
  it out (exact, checked only when a repeat is possible by the stone counts), and a search
  that plays one anyway gets a child with `superko=True`, which it scores as a loss for the
  player who made it.
* **Scoring** is OpenSpiel's Tromp-Taylor area score with `komi` (7.5): stones plus empty
  regions that reach only one colour; `score()` recomputes it here (for SGF results and the
  tests), `winner()` is OpenSpiel's.
* **Input planes** (MLPerf `mlperf07`-style, from the player to move): `history` pairs of own
  / opponent stone planes (the current and earlier positions), one to-play plane (ones when
  black is to move), and with `liberties` three planes of stones whose group has 1, 2 and ≥ 3
  liberties.

Actions are `row * N + col` (row 0 is the first line, "a1" = 0) and `N * N` is pass.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pyspiel
from scipy import ndimage

BLACK, WHITE = 1, -1
_NEIGHBOURS = ndimage.generate_binary_structure(2, 1)


class GoGame:
    """The rules of one board size: new positions, and the input planes of positions."""

    def __init__(self, board_size: int = 9, komi: float = 7.5, history: int = 4,
                 liberties: bool = True, max_moves: int | None = None) -> None:
        self.n = board_size
        self.komi = komi
        self.history = history
        self.liberties = liberties
        self.num_actions = board_size * board_size + 1
        self.pass_action = board_size * board_size
        params = {"board_size": board_size, "komi": komi}
        if max_moves is not None:
            params["max_game_length"] = max_moves
        self.spiel = pyspiel.load_game("go", params)
        self.max_moves = self.spiel.max_game_length()
        self.planes = 2 * history + 1 + (3 if liberties else 0)

    def new_position(self) -> GoPosition:
        state = self.spiel.new_initial_state()
        board = np.zeros((self.n, self.n), dtype=np.int8)
        return GoPosition(self, state, board, (board,), frozenset({board.tobytes()}),
                          frozenset({(0, 0)}))

    def position_from(self, moves: list[int]) -> GoPosition:
        pos = self.new_position()
        for move in moves:
            pos = pos.play(move)
        return pos

    def features(self, positions: list[GoPosition]) -> np.ndarray:
        """The input planes of each position, float32 (B, planes, N, N), from the mover's side."""
        out = np.zeros((len(positions), self.planes, self.n, self.n), dtype=np.float32)
        h = self.history
        for i, pos in enumerate(positions):
            me = pos.to_play
            for k, board in enumerate(pos.boards[:h]):
                out[i, 2 * k] = board == me
                out[i, 2 * k + 1] = board == -me
            if me == BLACK:
                out[i, 2 * h] = 1.0
            if self.liberties:
                libs = liberty_counts(pos.board)
                out[i, 2 * h + 1] = libs == 1
                out[i, 2 * h + 2] = libs == 2
                out[i, 2 * h + 3] = libs >= 3
        return out

    def coord(self, action: int) -> str:
        """GTP-style coordinates ("a1", "pass"; no letter skipped)."""
        if action == self.pass_action:
            return "pass"
        return f"{'abcdefghjklmnopqrst'[action % self.n]}{action // self.n + 1}"

    def action(self, coord: str) -> int:
        if coord == "pass":
            return self.pass_action
        return (int(coord[1:]) - 1) * self.n + "abcdefghjklmnopqrst".index(coord[0])


class GoPosition:
    """One position of a game: OpenSpiel's state plus the boards and repeats MiniGo keeps.

    Immutable: `play` returns the next position."""

    __slots__ = (
        "board",
        "boards",
        "counts",
        "game",
        "last",
        "moves",
        "seen",
        "state",
        "superko",
    )

    def __init__(self, game: GoGame, state: Any, board: np.ndarray, boards: tuple,
                 seen: frozenset, counts: frozenset, superko: bool = False,
                 moves: int = 0, last: int | None = None) -> None:
        self.game, self.state, self.board, self.boards = game, state, board, boards
        self.seen, self.counts, self.superko = seen, counts, superko
        self.moves, self.last = moves, last

    @property
    def to_play(self) -> int:
        return BLACK if self.state.current_player() == 0 else WHITE

    def is_terminal(self) -> bool:
        return self.superko or self.state.is_terminal()

    def winner(self) -> int:
        """+1 black wins, -1 white wins (a superko move loses for the player who made it)."""
        if self.superko:
            return self.to_play  # the player who moved into the repeat loses
        return 1 if self.state.returns()[0] > 0 else -1

    def score(self) -> float:
        """Tromp-Taylor area score, black minus white, komi included."""
        return float(area_owner(self.board).sum()) - self.game.komi

    def play(self, action: int) -> GoPosition:
        """The position after `action` (legal by OpenSpiel's rules; a superko repeat gives a
        terminal position with `superko` set)."""
        state = self.state.clone()
        state.apply_action(int(action))
        obs = np.asarray(state.observation_tensor(0), dtype=np.float32)
        n2 = self.game.n * self.game.n
        board = (obs[:n2] - obs[n2:2 * n2]).astype(np.int8).reshape(self.game.n, self.game.n)
        key = board.tobytes()
        superko = action != self.game.pass_action and key in self.seen
        count = (int((board == BLACK).sum()), int((board == WHITE).sum()))
        return GoPosition(self.game, state, board, (board,) + self.boards[:self.game.history - 1],
                          self.seen | {key}, self.counts | {count}, superko, self.moves + 1,
                          int(action))

    def legal_mask(self) -> np.ndarray:
        """Legal moves (bool, N*N+1): OpenSpiel's (no suicide, no simple ko) less the moves
        that repeat an earlier position (positional superko)."""
        if self.is_terminal():
            return np.zeros(self.game.num_actions, dtype=bool)
        mask = np.asarray(self.state.legal_actions_mask(), dtype=bool)
        me = self.to_play
        own = int((self.board == me).sum()) + 1
        opp = int((self.board == -me).sum())
        # a repeat needs an earlier position with one more own stone and at most as many
        # of the opponent's (a move adds a stone and may capture): rare, then checked exactly
        possible = any((b if me == BLACK else w) == own and (w if me == BLACK else b) <= opp
                       for b, w in self.counts)
        if possible:
            for action in np.flatnonzero(mask[:-1]):
                if self.play(int(action)).superko:
                    mask[action] = False
        return mask


def area_owner(board: np.ndarray) -> np.ndarray:
    """Whose each point is under Tromp-Taylor area scoring: a stone its colour's, an empty
    region the colour it alone reaches (+1 black, -1 white; 0 where it reaches both or none)."""
    owner = board.astype(np.int8).copy()
    regions, count = ndimage.label(board == 0, _NEIGHBOURS)
    for region in range(1, count + 1):
        mask = regions == region
        border = ndimage.binary_dilation(mask, _NEIGHBOURS) & ~mask
        colours = set(board[border].tolist())
        if len(colours) == 1:
            owner[mask] = colours.pop()
    return owner


def liberty_counts(board: np.ndarray) -> np.ndarray:
    """Each stone's group's number of liberties (0 on empty points)."""
    groups = np.zeros(board.shape, dtype=np.int32)
    black, nb = ndimage.label(board == BLACK, _NEIGHBOURS)
    white, nw = ndimage.label(board == WHITE, _NEIGHBOURS)
    groups = black + np.where(white > 0, white + nb, 0)
    if nb + nw == 0:
        return groups
    n = board.shape[0]
    padded = np.zeros((n + 2, n + 2), dtype=np.int32)
    padded[1:-1, 1:-1] = groups
    neighbours = np.stack([padded[:-2, 1:-1], padded[2:, 1:-1], padded[1:-1, :-2],
                           padded[1:-1, 2:]])  # (4, N, N): the group beside each point
    empty = np.flatnonzero(board.ravel() == 0)
    beside = neighbours.reshape(4, -1)[:, empty]  # (4, n_empty)
    touches = np.zeros((nb + nw + 1, len(empty)), dtype=bool)  # group x empty point
    touches[beside, np.broadcast_to(np.arange(len(empty)), beside.shape)] = True
    libs = touches.sum(axis=1)
    libs[0] = 0
    return np.where(groups > 0, libs[groups], 0)


class GoVectorEnv:
    """One game of Go against a uniformly random opponent, as a one-env vector env (what
    `build()` makes for every job; AlphaZero's loop plays self-play games of `game`
    instead). The agent plays black; reward ±1 at the end; illegal moves become passes."""

    metadata: ClassVar[dict] = {}

    def __init__(self, board_size: int = 9, komi: float = 7.5, history: int = 4,
                 liberties: bool = True, resign_threshold: float = -0.9,
                 max_moves: int | None = None, **_: Any) -> None:
        self.game = GoGame(board_size, komi, history, liberties, max_moves)
        self.resign_threshold = resign_threshold
        self.num_envs = 1
        shape = (self.game.planes, board_size, board_size)
        self.single_observation_space = gym.spaces.Box(0.0, 1.0, shape, np.float32)
        self.single_action_space = gym.spaces.Discrete(self.game.num_actions)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (1, *shape), np.float32)
        self.action_space = gym.spaces.MultiDiscrete([self.game.num_actions])
        self._rng = np.random.default_rng()
        self.position = self.game.new_position()
        self._return = 0.0

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.position = self.game.new_position()
        return self.game.features([self.position]), {}

    def _random_move(self) -> None:
        legal = np.flatnonzero(self.position.legal_mask())
        self.position = self.position.play(int(self._rng.choice(legal)))

    def step(self, actions: np.ndarray) -> tuple:
        action = int(np.asarray(actions).ravel()[0])
        if not self.position.legal_mask()[action]:
            action = self.game.pass_action
        self.position = self.position.play(action)
        if not self.position.is_terminal():
            self._random_move()
        done = self.position.is_terminal()
        reward = float(self.position.winner()) if done else 0.0
        info: dict = {}
        obs = self.game.features([self.position])
        if done:
            info = {"final_obs": obs, "episode": {"r": np.array([reward])},
                    "_episode": np.array([True])}
            self.position = self.game.new_position()
            obs = self.game.features([self.position])
        return (obs, np.array([reward], np.float32), np.array([done]), np.array([False]), info)

    def close(self) -> None:
        pass
