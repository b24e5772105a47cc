"""Go rules on known positions (OpenSpiel's engine with positional superko and Tromp-Taylor
scoring), the input planes and the random-opponent env."""

from __future__ import annotations

import numpy as np
import pytest

from hetrl.envs.go import BLACK, WHITE, GoGame, GoPosition, GoVectorEnv
from hetrl.envs.go_groups import liberty_counts


@pytest.fixture
def game() -> GoGame:
    return GoGame(board_size=5, komi=7.5)


def play(game: GoGame, coords: str) -> GoPosition:
    return game.position_from([game.action(c) for c in coords.split()])


def stone(pos: GoPosition, coord: str) -> int:
    a = pos.game.action(coord)
    return int(pos.board[a // pos.game.n, a % pos.game.n])


def test_capture_removes_the_surrounded_stone(game):
    pos = play(game, "b3 c3 d3 a5 c2 e5")
    assert stone(pos, "c3") == WHITE
    pos = pos.play(game.action("c4"))
    assert stone(pos, "c3") == 0
    assert (pos.board == BLACK).sum() == 4


def test_suicide_is_illegal(game):
    pos = play(game, "a2 e5 b1")  # white to play; a1 has no liberty and captures nothing
    assert pos.to_play == WHITE
    assert not pos.legal_mask()[game.action("a1")]
    assert pos.legal_mask()[game.action("e1")]


KO = "b3 c3 a2 d2 b1 c1 e5 b2"  # white b2 in atari; black c2 takes it, making a ko


def test_ko_recapture_waits_a_move(game):
    pos = play(game, KO + " c2")
    assert stone(pos, "b2") == 0 and stone(pos, "c2") == BLACK
    assert not pos.legal_mask()[game.action("b2")]  # the immediate recapture
    pos = pos.play(game.action("a5")).play(game.action("e4"))  # a threat and its answer
    assert pos.legal_mask()[game.action("b2")]
    pos = pos.play(game.action("b2"))
    assert stone(pos, "c2") == 0 and stone(pos, "b2") == WHITE


def test_positional_superko_forbids_a_repeat_that_simple_ko_allows(game):
    """A move into a whole-board position the game has had is illegal, however long ago: the
    position after white's recapture is put among those seen (as a longer cycle, e.g. a
    triple ko, would), and the recapture, legal under simple ko, becomes illegal."""
    pos = play(game, KO + " c2 a5 e4")
    target = pos.play(game.action("b2")).board
    assert not pos.play(game.action("b2")).superko
    repeated = GoPosition(game, pos.state, pos.history, pos.seen | {target.tobytes()},
                          pos.counts | {(int((target == 1).sum()), int((target == -1).sum()))})
    assert not repeated.legal_mask()[game.action("b2")]
    child = repeated.play(game.action("b2"))
    assert child.superko and child.is_terminal() and child.winner() == BLACK  # white loses
    assert repeated.legal_mask()[game.pass_action]  # a pass repeats nothing


def test_tromp_taylor_scoring_with_komi(game):
    # black walls off columns a-b, white columns d-e; column c is dame after a pass each
    moves = "a1 e1 a2 e2 b1 d1 b2 d2 b3 d3 b4 d4 b5 d5"
    pos = play(game, moves)
    assert pos.score() == pytest.approx(0 - 7.5)  # 10 v 10 area, komi decides
    pos = pos.play(game.pass_action).play(game.pass_action)
    assert pos.is_terminal() and pos.winner() == WHITE
    one_stone = play(game, "c3 pass pass")
    assert one_stone.is_terminal() and one_stone.score() == pytest.approx(25 - 7.5)
    assert one_stone.winner() == BLACK


def test_planes_are_from_the_movers_side(game):
    pos = play(game, "c3 b3")  # black to play
    x = game.features([pos])[0]
    assert x.shape == (game.planes, 5, 5) and game.planes == 12
    c3, b3 = (2, 2), (2, 1)
    assert x[0][c3] == 1 and x[1][b3] == 1  # own (black) and opponent stones now
    assert x[2][c3] == 1 and x[3].sum() == 0  # one move ago: black c3 only
    assert x[8].all()  # black to play
    assert x[11][c3] == 1 and x[11][b3] == 1  # both groups have >= 3 liberties
    pos = pos.play(game.action("a3"))
    assert game.features([pos])[0][9][b3] == 0 and game.features([pos])[0][8].sum() == 0


def test_liberties():
    board = np.zeros((5, 5), np.int8)
    board[0, 0] = BLACK  # a1
    board[0, 1] = WHITE  # b1: a1 is black, so c1 and b2: 2 liberties
    board[2, 2] = BLACK
    board[2, 3] = BLACK  # a 2-stone group with 6 liberties
    libs = liberty_counts(board)
    assert libs[0, 0] == 1  # a1 has only a2 left
    assert libs[0, 1] == 2 and libs[2, 2] == 6 and libs[2, 3] == 6 and libs[1, 1] == 0


def _liberty_counts_by_labels(board: np.ndarray) -> np.ndarray:
    """The reference: groups labelled by scipy, each group's liberties the empty points
    its dilation reaches."""
    from scipy import ndimage

    cross = ndimage.generate_binary_structure(2, 1)
    out = np.zeros(board.shape, dtype=np.int64)
    for colour in (BLACK, WHITE):
        labels, count = ndimage.label(board == colour, cross)
        for g in range(1, count + 1):
            group = labels == g
            out[group] = (ndimage.binary_dilation(group, cross) & (board == 0)).sum()
    return out


@pytest.mark.parametrize("size", [4, 9])
def test_liberties_of_every_group_of_random_games(size):
    for pos in _random_positions(size, 2, seed=size)[::3]:
        np.testing.assert_array_equal(pos.liberties(), _liberty_counts_by_labels(pos.board))


def test_env_plays_a_game_against_random():
    env = GoVectorEnv(board_size=5)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (1, 12, 5, 5)
    for _ in range(200):
        legal = np.flatnonzero(env.position.legal_mask())
        obs, reward, done, _, info = env.step(np.array([legal[0]]))
        if done[0]:
            assert reward[0] in (-1.0, 1.0) and "episode" in info
            break
    else:
        pytest.fail("no game ended")


def test_sgf_of_a_game(game):
    from hetrl.algos.go_games import GameRecord, to_sgf

    moves = [game.action(c) for c in ["a1", "e5", "c3"]] + [game.pass_action] * 2
    pos = game.position_from(moves)
    record = GameRecord(moves, pos.winner(), False, None, None, None, pos.score())
    sgf = to_sgf(record, game)
    assert sgf.startswith("(;GM[1]FF[4]") and "SZ[5]KM[7.5]RU[Tromp-Taylor]" in sgf
    assert ";B[ae];W[ea];B[cc];W[];B[])" in sgf  # a1 is the bottom-left: SGF's row "e"
    assert f"RE[{'B' if pos.winner() == 1 else 'W'}+{abs(pos.score()):g}]" in sgf


def _random_positions(size: int, games: int, seed: int) -> list[GoPosition]:
    """Every position of random games (few passes, long: many captures and repeats)."""
    game = GoGame(size, max_moves=300)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(games):
        pos = game.new_position()
        while not pos.is_terminal():
            out.append(pos)
            moves = np.flatnonzero(pos.legal_mask()[:-1])
            pos = pos.play(int(rng.choice(moves)) if len(moves) and rng.random() > 0.02
                           else game.pass_action)
    return out


@pytest.mark.parametrize("size", [3, 4, 9])
def test_legal_moves_leave_out_exactly_the_superko_repeats(size):
    """OpenSpiel's legal moves less those whose position repeats (found by playing each):
    on 3x3 and 4x4 random games repeat positions often."""
    repeats = 0
    for pos in _random_positions(size, 8 if size < 9 else 2, seed=size):
        spiel = np.asarray(pos.state.legal_actions_mask(), dtype=bool)
        superko = [a for a in np.flatnonzero(spiel[:-1]) if pos.play(int(a)).superko]
        expected = spiel.copy()
        expected[superko] = False
        np.testing.assert_array_equal(pos.legal_mask(), expected)
        repeats += len(superko)
    assert repeats > 0 or size == 9  # the small boards checked real repeats
