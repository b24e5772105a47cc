"""`python -m hetrl.gtp`: a run's Go agent as a GTP 2 engine. Two engines play a whole game
through the protocol (no move cap, the job's rules), a GUI's command sequence is answered as
GTP says, and the loaded agent plays with the evaluation's choice rule."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import run_job

import hetrl
from hetrl.algos.mcts import choose_move
from hetrl.envs.go import NO_CAP, RESIGN, GoGame
from hetrl.gtp import Engine

TINY = ("algo=alphazero", "steps=64", "algo.width=8", "algo.blocks=1",
        "algo.search.readouts=8", "algo.search.fast_readouts=4",
        "selfplay.games_per_generation=4", "selfplay.concurrent_games=4",
        "selfplay.train_steps=2", "selfplay.eval_games=2", "selfplay.eval_readouts=4",
        "selfplay.generations=1", "tracking=none")


@pytest.fixture(scope="module")
def go_run(tmp_path_factory):
    """A one-generation AlphaZero job on 5x5: its folder."""
    folder = tmp_path_factory.mktemp("gtp")
    run_job(folder, *TINY)
    return folder / "job0"


class Gtp:
    """A `python -m hetrl.gtp` process, asked one command at a time."""

    def __init__(self, run, *options: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "hetrl.gtp", str(run), *options], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "PYTHONWARNINGS": "ignore"})

    def __call__(self, command: str) -> str:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        lines = []
        while (line := self.process.stdout.readline()) not in ("\n", ""):
            lines.append(line)
        answer = "".join(lines)
        assert answer.startswith("="), f"{command}: {answer}"
        return answer[1:].strip()


class InProcess:
    """An `Engine` in this process, asked as a `Gtp` is."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def __call__(self, command: str) -> str:
        answer = self.engine.handle(command)
        assert answer.startswith("="), f"{command}: {answer}"
        return answer[1:].strip()


@pytest.mark.slow
def test_two_engines_play_a_whole_game_through_gtp(go_run):
    """`python -m hetrl.gtp` (black, a process of its own) against an engine in this process
    (white): every move goes through the protocol's text, to the end of the game."""
    black = Gtp(go_run, "--readouts", "4")
    white = InProcess(Engine(hetrl.load(go_run), readouts=4))
    try:
        for engine in (black, white):
            assert engine("protocol_version") == "2"
            engine("boardsize 5"), engine("clear_board"), engine("komi 0.5")
        moves, passes = [], 0
        while passes < 2:
            mover, other = (black, white) if len(moves) % 2 == 0 else (white, black)
            colour = "b" if len(moves) % 2 == 0 else "w"
            vertex = mover(f"genmove {colour}")
            if vertex == "RESIGN":
                break
            other(f"play {colour} {vertex}")
            moves.append(vertex)
            passes = passes + 1 if vertex == "PASS" else 0
        game = GoGame(5, komi=0.5, max_moves=NO_CAP)
        final = game.position_from([game.action(v) for v in moves])
        assert len(moves) > 10 and final.is_terminal()
        score = final.score()
        expected = f"{'B' if score > 0 else 'W'}+{abs(score):g}"
        assert black("final_score") == white("final_score") == expected
        assert black("quit") == ""
    finally:
        black.process.stdin.close()
        assert black.process.wait(timeout=60) == 0


def test_a_gui_command_sequence_is_answered_as_gtp_says(go_run):
    engine = Engine(hetrl.load(go_run), readouts=4)
    session = [  # GoGui / Sabaki open with these, then play a few moves and take one back
        ("protocol_version", "= 2"), ("1 name", "=1 hetrl"), ("version", "= 0.1.0"),
        ("known_command genmove", "= true"), ("known_command gogui-analyze_commands", "= false"),
        ("boardsize 9", "? unacceptable size"), ("boardsize 5", "="), ("clear_board", "="),
        ("komi 6.5", "="), ("time_settings 0 5 1", "="), ("play B c3", "="),
        ("play w C3", "? illegal move"), ("play w I1", "? illegal move (vertex 'I1'"),
        ("2 undo", "=2"), ("undo", "? cannot undo"), ("play b C3", "="),
        ("frobnicate", "? unknown command"), ("quit", "="),
    ]
    for command, expected in session:
        assert engine.handle(command).startswith(expected), command
    assert engine.done
    assert "X" in engine.handle("showboard") and engine.handle("final_score") == "= B+18.5\n\n"
    listed = engine.handle("list_commands")[2:].split()
    assert {"genmove", "play", "undo", "final_score", "showboard", "quit"} <= set(listed)
    reply = engine.handle("genmove w")
    assert reply.startswith("= ") and engine.position.to_play == 1  # white moved


def test_the_agent_moves_with_the_evaluations_rule_and_the_engine_resigns(go_run):
    agent = hetrl.load(go_run)
    pos = agent.game.new_position()
    root = agent.search(pos)
    rng, same = np.random.default_rng(5), np.random.default_rng(5)
    assert agent.move(pos, rng=rng) == choose_move(root.search_policy(), 0, agent.softpicks,
                                                   same)
    late = agent.game.position_from([0, 24, 1, 23, 2, 22])  # past the drawn opening moves
    assert agent.move(late) == int(np.argmax(agent.search(late).search_policy()))
    engine = Engine(agent, readouts=4, resign=1.0)  # every position is valued below 1
    assert engine.handle("genmove b") == "= RESIGN\n\n" and engine.moves == []
    assert agent.game.coord(RESIGN) == "resign" and agent.game.action("RESIGN") == RESIGN
    assert agent.game.action("E5") == agent.game.action("e5") == 24
