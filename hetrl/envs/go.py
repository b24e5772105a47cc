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
from open_spiel.python.observation import make_observation

from hetrl.envs.go_groups import Groups, area_owner, groups, own_eyes

BLACK, WHITE = 1, -1
RESIGN = -1
"""The action of a player who resigns (GTP's "resign"): no move of the game."""
COLUMNS = "abcdefghjklmnopqrstuvwxyz"
"""GTP's column letters: "i" is skipped."""


NO_CAP = 1_000_000
"""A game length no real game reaches: OpenSpiel needs a cap, a GTP opponent plays on."""


class GoGame:
    """The rules of one board size: new positions, and the input planes of positions."""

    def __init__(self, board_size: int = 9, komi: float = 7.5, history: int = 4,
                 liberties: bool = True, max_moves: int | None = None) -> None:
        """`max_moves` caps a game's length (OpenSpiel's default: 2·N²; a GTP engine, whose
        opponent may play on, sets NO_CAP)."""
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
        # OpenSpiel writes a state's planes (black, white, empty, to play) into this buffer:
        # no Python list per move, as `state.observation_tensor()` makes
        self._observation = make_observation(self.spiel)
        empty = np.zeros((board_size, board_size), np.int8)
        groups(empty), own_eyes(empty, BLACK)  # numba's kernels loaded (or compiled) now, not
        # in the first search

    def new_position(self) -> GoPosition:
        state = self.spiel.new_initial_state()
        history = np.zeros((self.history, self.n, self.n), dtype=np.int8)
        return GoPosition(self, state, history, frozenset({history[0].tobytes()}), frozenset())

    def board_of(self, state: Any) -> np.ndarray:
        """The state's board (int8 N×N: +1 black, −1 white, 0 empty)."""
        self._observation.set_from(state, 0)
        n2 = self.n * self.n
        planes = self._observation.tensor
        return (planes[:n2] - planes[n2:2 * n2]).astype(np.int8).reshape(self.n, self.n)

    def position_from(self, moves: list[int]) -> GoPosition:
        pos = self.new_position()
        for move in moves:
            pos = pos.play(move)
        return pos

    def features(self, positions: list[GoPosition]) -> np.ndarray:
        """The input planes of each position, float32 (B, planes, N, N), from the mover's side
        (before the first moves, the missing earlier boards are empty)."""
        out = np.empty((len(positions), self.planes, self.n, self.n), dtype=np.float32)
        h = self.history
        boards = np.stack([pos.history for pos in positions])  # (B, h, N, N)
        me = np.array([pos.to_play for pos in positions], dtype=np.int8)[:, None, None, None]
        out[:, 0:2 * h:2] = boards == me
        out[:, 1:2 * h:2] = boards == -me
        out[:, 2 * h] = me[:, 0] == BLACK
        if self.liberties:
            libs = np.stack([pos.liberties() for pos in positions])
            out[:, 2 * h + 1] = libs == 1
            out[:, 2 * h + 2] = libs == 2
            out[:, 2 * h + 3] = libs >= 3
        return out

    def coord(self, action: int) -> str:
        """GTP's vertex of an action: column letter ("i" skipped, as GTP and Go boards skip
        it) and row number from 1, "a1" the action 0; "pass", "resign"."""
        if action == self.pass_action:
            return "pass"
        if action == RESIGN:
            return "resign"
        return f"{COLUMNS[action % self.n]}{action // self.n + 1}"

    def action(self, coord: str) -> int:
        """The action of a GTP vertex ("D4" or "d4", "pass", "resign": RESIGN)."""
        text = coord.strip().lower()
        if text in ("pass", "resign"):
            return self.pass_action if text == "pass" else RESIGN
        column, row = text[:1], text[1:]
        if (not row.isdigit() or column not in COLUMNS[:self.n]
                or not 1 <= int(row) <= self.n):
            raise ValueError(
                f"vertex {coord!r} is invalid: valid vertices on {self.n}x{self.n} are "
                f"A1 to {COLUMNS[self.n - 1].upper()}{self.n} (no I), pass and resign")
        return (int(row) - 1) * self.n + COLUMNS.index(column)


class GoPosition:
    """One position of a game: OpenSpiel's state plus the boards and repeats MiniGo keeps.

    Immutable: `play` returns the next position. `history` holds this board and the earlier
    ones the input planes show (newest first, empty before the game's start); `seen` every
    board of the game so far as bytes, `counts` their (black, white) stone counts (the
    constructor adds this board's) and `most` the most stones of each colour among them
    (`play` carries it over; by default read from `counts`)."""

    __slots__ = (
        "_groups",
        "counts",
        "game",
        "history",
        "last",
        "most",
        "moves",
        "seen",
        "state",
        "stones",
        "superko",
        "terminal",
        "to_play",
    )

    def __init__(self, game: GoGame, state: Any, history: np.ndarray, seen: frozenset,
                 counts: frozenset, superko: bool = False, moves: int = 0,
                 last: int | None = None, most: tuple[int, int] | None = None) -> None:
        self.game, self.state, self.history = game, state, history
        self.seen, self.superko = seen, superko
        self.moves, self.last = moves, last
        board = history[0]
        self.stones = (int(np.count_nonzero(board == BLACK)),
                       int(np.count_nonzero(board == WHITE)))
        self.counts = counts | {self.stones}
        if most is None:  # not carried over from the position before: read from `counts`
            most = (max(c[0] for c in self.counts), max(c[1] for c in self.counts))
        self.most = (max(most[0], self.stones[0]), max(most[1], self.stones[1]))
        self.to_play = BLACK if state.current_player() == 0 else WHITE
        self.terminal = superko or state.is_terminal()
        self._groups: Groups | None = None

    @property
    def board(self) -> np.ndarray:
        return self.history[0]

    def is_terminal(self) -> bool:
        return self.terminal

    def winner(self) -> int:
        """+1 black wins, -1 white wins (a superko move loses for the player who made it)."""
        if self.superko:
            return self.to_play  # the player who moved into the repeat loses
        return 1 if self.state.returns()[0] > 0 else -1

    def score(self) -> float:
        """Tromp-Taylor area score, black minus white, komi included."""
        return float(area_owner(self.board).sum()) - self.game.komi

    def groups(self) -> Groups:
        """The board's groups (computed once: the input planes and `legal_mask` both ask)."""
        if self._groups is None:
            self._groups = groups(self.board)
        return self._groups

    def own_eyes(self) -> np.ndarray:
        """(N*N,) bool: the empty points whose every neighbour on the board is a stone of the
        player to move (filling one only takes a liberty of its own group)."""
        return own_eyes(self.board, self.to_play)

    def liberties(self) -> np.ndarray:
        """Each stone's group's number of liberties (0 on empty points)."""
        return self.groups().per_point()

    def play(self, action: int) -> GoPosition:
        """The position after `action` (legal by OpenSpiel's rules; a superko repeat gives a
        terminal position with `superko` set)."""
        state = self.state.clone()
        state.apply_action(int(action))
        history = np.empty_like(self.history)
        history[0] = board = self.game.board_of(state)
        history[1:] = self.history[:-1]
        key = board.tobytes()
        superko = action != self.game.pass_action and key in self.seen
        return GoPosition(self.game, state, history, self.seen | {key}, self.counts, superko,
                          self.moves + 1, int(action), self.most)

    def legal_mask(self) -> np.ndarray:
        """Legal moves (bool, N*N+1): OpenSpiel's (no suicide, no simple ko) less the moves
        that repeat an earlier position (positional superko)."""
        if self.terminal:
            return np.zeros(self.game.num_actions, dtype=bool)
        mask = np.asarray(self.state.legal_actions_mask(), dtype=bool)
        for action in self._may_repeat(mask):
            if self.play(action).superko:
                mask[action] = False
        return mask

    def _may_repeat(self, mask: np.ndarray) -> list[int]:
        """The legal moves whose position has the stone counts of an earlier one (a repeat
        needs them; rare, then checked by playing the move). A move adds a stone of the mover
        and removes the opponent's groups beside it that it takes the last liberty of."""
        me = 0 if self.to_play == BLACK else 1
        own, opp = self.stones[me] + 1, self.stones[1 - me]
        if own > self.most[me]:  # more than any earlier board had: `seen` is False for all
            return []

        def seen(opp_after: int) -> bool:
            return ((own, opp_after) if me == 0 else (opp_after, own)) in self.counts

        g = self.groups()
        captures = np.zeros(self.game.num_actions, dtype=np.int64)  # stones each move takes
        colour = -self.to_play
        for group in np.flatnonzero((g.libs == 1) & (g.colour == colour)):
            captures[g.liberty[group]] += g.sizes[group]
        moves = np.flatnonzero(mask[:-1])
        if seen(opp):
            return [int(a) for a in moves if captures[a] == 0 or seen(opp - captures[a])]
        return [int(a) for a in moves[captures[moves] > 0] if seen(opp - captures[a])]


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
