"""`python -m hetrl.gtp <run> [--readouts N] [--seconds S] [--resign Q]`: a run's Go agent as
a GTP 2 engine on standard input and output, for Go programs, servers and GUIs (GNU Go,
KataGo, Sabaki, GoGui, the servers' bridges).

The engine keeps the game's moves and plays what its opponent plays, however long the game
(no move cap), under the job's rules: Tromp-Taylor area scoring, no suicide, positional
superko (a move that repeats an earlier position is illegal). `genmove` searches with the
agent (`GoAgent.move`: the job's evaluation rule, its readouts by default), or for `--seconds`
a move as many readouts as fit; it resigns when the search values the position below
`--resign` for the side to move, and passes when the game is over. A board size other than the
network's is refused ("unacceptable size"), as GTP says.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Callable, TextIO

from hetrl.envs.go import BLACK, NO_CAP, RESIGN, GoGame, GoPosition
from hetrl.envs.go_groups import area_owner
from hetrl.go_agent import GoAgent

VERSION = "0.1.0"


class GtpError(Exception):
    """A command that fails: its message is GTP's error response."""


class Engine:
    """The GTP commands over a `GoAgent`; `handle(line)` gives the response (or None)."""

    def __init__(self, agent: GoAgent, readouts: int | None = None,
                 seconds: float | None = None, resign: float | None = None) -> None:
        self.agent, self.readouts, self.seconds = agent, readouts, seconds
        self.resign = resign if resign is not None else agent.search_config.resign_threshold
        self.komi = agent.game.komi
        self.size = agent.game.n
        self.moves: list[int] = []
        self.game = self._game()
        self._kept: tuple[tuple, GoPosition | None] = ((), None)
        self.done = False
        self.commands: dict[str, Callable[[list[str]], str]] = {
            "protocol_version": lambda _: "2", "name": lambda _: "hetrl",
            "version": lambda _: VERSION, "known_command": self.known_command,
            "list_commands": lambda _: "\n".join(self.commands), "boardsize": self.boardsize,
            "clear_board": self.clear_board, "komi": self.set_komi, "play": self.play,
            "genmove": self.genmove, "undo": self.undo, "final_score": self.final_score,
            "showboard": self.showboard, "time_settings": lambda _: "",
            "time_left": self.time_left, "quit": self.quit}

    def _game(self) -> GoGame:
        g = self.agent.game
        return GoGame(self.size, self.komi, g.history, g.liberties, max_moves=NO_CAP)

    @property
    def position(self) -> GoPosition:
        """The position after the game's moves (kept while they are the same)."""
        key = (self.game, tuple(self.moves))
        if self._kept[0] != key:
            self._kept = (key, self.game.position_from(self.moves))
        return self._kept[1]

    def _push(self, pos: GoPosition, action: int) -> None:
        """Play `action` in `pos`, the position after the game's moves."""
        self.moves.append(action)
        self._kept = ((self.game, tuple(self.moves)), pos.play(action))

    def handle(self, line: str) -> str | None:
        """The response to one line of GTP ("= ..." or "? ..." and a blank line)."""
        words = line.split("#", 1)[0].replace("\t", " ").split()
        if not words:
            return None
        ident = words.pop(0) if words[0].isdigit() else ""
        if not words:
            return f"?{ident} empty command\n\n"
        command, args = words[0].lower(), words[1:]
        if command not in self.commands:
            return f"?{ident} unknown command\n\n"
        try:
            return f"={ident} {self.commands[command](args)}".rstrip(" ") + "\n\n"
        except GtpError as error:
            return f"?{ident} {error}\n\n"

    def known_command(self, args: list[str]) -> str:
        return str(bool(args) and args[0].lower() in self.commands).lower()

    def boardsize(self, args: list[str]) -> str:
        size = _int(args, "boardsize")
        if size != self.agent.game.n:
            raise GtpError("unacceptable size")
        return self.clear_board([])

    def clear_board(self, args: list[str]) -> str:
        self.moves = []
        return ""

    def set_komi(self, args: list[str]) -> str:
        try:
            self.komi = float(args[0])
        except (IndexError, ValueError):
            raise GtpError("syntax error (komi <float>)") from None
        self.game = self._game()
        return ""

    def time_left(self, args: list[str]) -> str:
        """`time_left <colour> <seconds> <stones>`: a move takes at most a share of it."""
        if len(args) >= 2:
            left = float(args[1])
            share = left / max(int(args[2]) if len(args) > 2 and args[2] != "0" else 20, 1)
            self.seconds = min(self.seconds or share, share)
        return ""

    def _turn(self, colour: str) -> None:
        """Make `colour` the side to move (a pass for the other side if needed: GTP lets a
        controller give one colour two moves in a row, the rules' engine does not)."""
        want = {"b": BLACK, "black": BLACK, "w": -BLACK, "white": -BLACK}.get(colour.lower())
        if want is None:
            raise GtpError(f"syntax error (colour {colour!r}: valid colours are b, w)")
        if self.position.to_play != want:
            self.moves.append(self.game.pass_action)

    def play(self, args: list[str]) -> str:
        if len(args) != 2:
            raise GtpError("syntax error (play <colour> <vertex>)")
        try:
            action = self.game.action(args[1])
        except ValueError as error:
            raise GtpError(f"illegal move ({error})") from None
        if action == RESIGN:
            return ""
        before = list(self.moves)
        self._turn(args[0])
        pos = self.position
        if not pos.is_terminal() and pos.legal_mask()[action]:
            self._push(pos, action)
            return ""
        self.moves = before
        raise GtpError("illegal move")

    def genmove(self, args: list[str]) -> str:
        if len(args) != 1:
            raise GtpError("syntax error (genmove <colour>)")
        self._turn(args[0])
        pos = self.position
        if pos.is_terminal():
            return "pass"
        action = self._search(pos)
        if action != RESIGN:
            self._push(pos, action)
        return self.game.coord(action).upper()

    def _search(self, pos: GoPosition) -> int:
        """The agent's move, after `readouts` or as many as fit in `seconds`; RESIGN when
        the search values the position below `resign` for the side to move."""
        agent = self.agent
        if self.seconds is None:
            root = agent.search(pos, self.readouts)
        else:
            root, deadline = agent.search(pos, 8), time.monotonic() + self.seconds
            while time.monotonic() < deadline:
                agent.extend(root, 8)
        if root.Q * pos.to_play < self.resign:
            return RESIGN
        return agent.choose(root, pos)

    def undo(self, args: list[str]) -> str:
        if not self.moves:
            raise GtpError("cannot undo")
        self.moves.pop()
        return ""

    def final_score(self, args: list[str]) -> str:
        score = self.position.score()
        return "0" if score == 0 else f"{'B' if score > 0 else 'W'}+{abs(score):g}"

    def showboard(self, args: list[str]) -> str:
        board, n = self.position.board, self.size
        letters = "ABCDEFGHJKLMNOPQRSTUVWXYZ"[:n]
        rows = [f"{r + 1:2d} " + " ".join(".XO"[int(board[r, c])] for c in range(n))
                for r in reversed(range(n))]
        owner = area_owner(board)
        return "\n" + "\n".join(["   " + " ".join(letters), *rows,
                                 f"komi {self.komi:g}, area black {int((owner == 1).sum())}, "
                                 f"white {int((owner == -1).sum())}"])

    def quit(self, args: list[str]) -> str:
        self.done = True
        return ""


def _int(args: list[str], command: str) -> int:
    try:
        return int(args[0])
    except (IndexError, ValueError):
        raise GtpError(f"syntax error ({command} <int>)") from None


def serve(engine: Engine, stdin: TextIO, stdout: TextIO) -> None:
    """Answer GTP commands from `stdin` until `quit` or the end of the input."""
    for line in stdin:
        response = engine.handle(line)
        if response is not None:
            stdout.write(response)
            stdout.flush()
        if engine.done:
            return


def main(args: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m hetrl.gtp",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("run", help="an AlphaZero job folder, policy.pt or runs:/<id>")
    parser.add_argument("--readouts", type=int, help="readouts a move (default: the job's "
                        "evaluation readouts, selfplay.eval_readouts)")
    parser.add_argument("--seconds", type=float, help="search each move for this long instead")
    parser.add_argument("--resign", type=float, help="resign below this value for the side to "
                        "move, in [-1, 1] (default: the job's algo.search.resign_threshold)")
    parser.add_argument("--tracking-uri", help="the MLflow store of runs:/<id>")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch's intra-op threads (default 1: a small network's search "
                        "is slower on more when the cores are shared)")
    options = parser.parse_args(args)
    from hetrl.loading import load
    from hetrl.runtime import configure_torch

    configure_torch(options.threads)  # this process is the engine's own
    agent = load(options.run, tracking_uri=options.tracking_uri)
    if not isinstance(agent, GoAgent):
        parser.error(f"run {options.run!r} is invalid: its env is {agent.config.env.get('id')}"
                     "; valid runs are AlphaZero runs on Go (algo=alphazero env=go5|go7|go9)")
    serve(Engine(agent, options.readouts, options.seconds, options.resign), sys.stdin,
          sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
