"""MiniGo's MCTS: it finds a one-move capture and a one-move save, and a game's search is
the same batched with other games as alone. The pure-MCTS ladder's players: more simulations
play stronger."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest
import torch

from hetrl.algos.alphazero import PolicyValueNet
from hetrl.algos.go_games import evaluator, match, play_games
from hetrl.algos.mcts import (
    Node,
    Search,
    SearchConfig,
    SearchStats,
    run_searches,
    search_position,
)
from hetrl.algos.pure_mcts import PureMcts
from hetrl.envs.go import GoGame


def score_evaluator(positions):
    """Uniform priors and tanh(Tromp-Taylor score / 4): what a search needs to see that
    stones captured or lost change the game."""
    n = positions[0].game.num_actions
    priors = np.full((len(positions), n), 1.0 / n)
    return priors, np.array([np.tanh(p.score() / 4.0) for p in positions])


@pytest.fixture
def game() -> GoGame:
    return GoGame(board_size=5, komi=0.5)


def moves(game, coords):
    return game.position_from([game.action(c) for c in coords.split()])


CFG = SearchConfig(virtual_losses=1, value_init_penalty=0.0)


def test_finds_a_one_move_capture(game):
    pos = moves(game, "b3 c3 b4 c4 d3 a1 d4 e1 c2 a5")  # white c3-c4 has one liberty: c5
    root = search_position(pos, score_evaluator, CFG, readouts=300)
    assert game.coord(int(np.argmax(root.visits()))) == "c5"


def test_finds_a_one_move_save(game):
    pos = moves(game, "c3 b3 c4 b4 a1 d3 e1 d4 a5 c2")  # black c3-c4 has one liberty: c5
    root = search_position(pos, score_evaluator, CFG, readouts=400)
    assert game.coord(int(np.argmax(root.visits()))) == "c5"


def black_passes_evaluator(positions):
    """A network with half of black's prior on pass and none of white's, value 0 everywhere:
    it never thinks of white passing back."""
    n = positions[0].game.num_actions
    priors = np.full((len(positions), n), 1.0 / (n - 1))
    for row, pos in zip(priors, positions):
        row[-1] = 0.0
        if pos.to_play == 1:  # black
            row *= 0.5
            row[-1] = 0.5
    return priors, np.zeros(len(positions))


def test_after_a_pass_the_reply_pass_is_read_first(game):
    """MiniGo's rule: below black's pass on an empty board, the search reads white's
    game-ending reply pass first (the count that komi wins for white), however little the
    network thinks of it, so black's pass is seen to lose and gets few of the readouts."""
    root = search_position(game.new_position(), black_passes_evaluator, CFG, readouts=64)
    after_pass = root.children[game.pass_action]
    assert after_pass.child_N[game.pass_action] >= 1  # white's reply pass was read
    assert root.child_W[game.pass_action] / root.child_N[game.pass_action] < -0.5
    assert root.child_N[game.pass_action] < 64 / 4


def test_own_eyes_are_the_empty_points_walled_by_the_mover(game):
    pos = moves(game, "a2 e5 b1 e4")  # black a2 and b1 wall a1 in; black to move
    assert np.flatnonzero(pos.own_eyes()).tolist() == [game.action("a1")]
    assert not pos.play(game.action("c3")).own_eyes().any()  # white to move: none of its own


def test_pass_when_done_keeps_pass_out_of_the_search_until_only_eye_fills_remain(game):
    """With `pass_when_done` a search never reads a pass while a move that fills no eye of
    the mover's own is legal, however much its network likes passing."""
    cfg = SearchConfig(virtual_losses=1, value_init_penalty=0.0, pass_when_done=True)
    root = search_position(game.new_position(), black_passes_evaluator, cfg, readouts=16)
    assert root.child_N[game.pass_action] == 0 and not root.legal[game.pass_action]
    # black fills the board but a1 and e5 while white passes: only its two eyes are left
    stones = [f"{c}{r}" for c in "abcde" for r in range(1, 6) if f"{c}{r}" not in ("a1", "e5")]
    two_eyes = game.position_from([a for c in stones for a in (game.action(c), game.pass_action)])
    node = Node(two_eyes)
    node.expand(np.full(game.num_actions, 1.0 / game.num_actions), 0.0, cfg)
    assert node.legal[game.pass_action] and node.legal.sum() == 3  # a1, e5, pass


def test_batched_search_equals_one_game_alone():
    game = GoGame(board_size=5)
    torch.manual_seed(0)
    net = PolicyValueNet(game.planes, 5, 8, 1).double()
    cfg = SearchConfig(virtual_losses=4)
    positions = [moves(game, c) for c in ("c3", "c3 b2", "b2 c3 d4", "a1")]
    alone = []
    for pos in positions:
        root = Node(pos)
        run_searches([Search(root, 48)], _double(net, game), cfg)
        alone.append(root.visits())
    roots = [Node(pos) for pos in positions]
    stats = SearchStats()
    run_searches([Search(r, 48) for r in roots], _double(net, game), cfg, stats)
    for root, visits in zip(roots, alone):
        np.testing.assert_array_equal(root.visits(), visits)
    assert stats.mean_batch > 4  # leaves of several games in one network call


def _double(net, game):
    """The network in float64 as an evaluator: batch size cannot change its sums' rounding."""
    def evaluate(positions):
        x = torch.from_numpy(game.features(list(positions))).double()
        with torch.no_grad():
            net.eval()
            logits, value = net(x)
        sides = np.array([p.to_play for p in positions], dtype=np.float64)
        return torch.softmax(logits, 1).numpy(), value.numpy() * sides
    return evaluate


def test_self_play_records_legal_games_with_visit_targets():
    game = GoGame(board_size=5)
    net = PolicyValueNet(game.planes, 5, 8, 1)
    cfg = SearchConfig(readouts=16, fast_readouts=4, virtual_losses=2)
    stats = SearchStats()
    records = play_games(4, 4, game, evaluator(net, game), cfg, np.random.default_rng(0), stats)
    assert len(records) == 4
    for r in records:
        replay = game.position_from(r.moves)  # every move legal
        assert replay.is_terminal() or r.resigned
        assert r.winner in (-1, 1)
        np.testing.assert_allclose(r.pis.sum(axis=1), 1.0, rtol=1e-5)
        assert set(np.unique(r.zs)) <= {-1.0, 1.0} and len(r.zs) == len(r.planes)
    assert stats.leaves > 0 and stats.mean_batch > 1


def test_pure_mcts_beats_random_and_the_higher_rung_beats_the_lower(game):
    """Random-rollout MCTS (OpenSpiel's, no network) on 5x5: 300 simulations a move win
    >= 90% of 20 games against a uniformly random player and >= 80% against 10 simulations,
    colours alternating (measured: 95-100% and 100% over three seeds)."""
    rng = np.random.default_rng(0)
    assert match(20, game, PureMcts(game, 300, 0), None, SearchConfig(), rng) >= 0.9
    assert match(20, game, PureMcts(game, 300, 1), PureMcts(game, 10, 2), SearchConfig(),
                 rng) >= 0.8


def test_pure_mcts_finds_a_one_move_capture(game):
    pos = moves(game, "b3 c3 b4 c4 d3 a1 d4 e1 c2 a5")  # white c3-c4 has one liberty: c5
    assert game.coord(PureMcts(game, 1000, 0).move(pos)) == "c5"


def _digest(records) -> str:
    """One hash of everything self-play gives: moves, results, planes, visit targets."""
    h = hashlib.sha256()
    for r in records:
        h.update(np.array(r.moves, np.int64).tobytes())
        h.update(repr((r.winner, r.resigned, r.score)).encode())
        for a in (r.planes, r.pis, r.zs):
            h.update(a.tobytes())
    return h.hexdigest()[:16]


@pytest.mark.parametrize("size,games,readouts,resign,digest", [
    (5, 6, 24, -0.1, "490d6f3a451c49d2"),
    (9, 3, 32, -0.3, "20c13018f469e785"),
])
def test_self_play_is_pinned(size, games, readouts, resign, digest):
    """Self-play with every part of the search on (PUCT, virtual losses, Dirichlet noise,
    softpicks, playout-cap randomization, resignation, superko) gives, move for move and
    visit for visit, the games it gave when this test was written: a speed-up of the search
    or the rules may not change what they compute (re-pinned when the search took MiniGo's
    rule of reading the reply pass first)."""
    game = GoGame(board_size=size)
    torch.manual_seed(0)
    net = PolicyValueNet(game.planes, size, 8, 1).double()
    cfg = SearchConfig(readouts=readouts, fast_readouts=readouts // 4, virtual_losses=4,
                       resign_threshold=resign, resign_disable_pct=0.3)
    records = play_games(games, games, game, _double(net, game), cfg,
                         np.random.default_rng(7))
    assert any(r.resigned for r in records) and not all(r.resigned for r in records)
    assert _digest(records) == digest


def test_compiled_puct_picks_numpys_argmax():
    """The compiled PUCT argmax is numpy's formula, operation for operation: the same child
    on random statistics (ties included: the first of equal scores)."""
    cfg = SearchConfig()
    rng = np.random.default_rng(0)
    game = GoGame(board_size=9)
    for _ in range(2000):
        node = Node(game.new_position())
        n = game.num_actions
        node.legal = rng.random(n) > 0.3
        node.child_N = rng.integers(0, 4, n).astype(np.float64)
        node.child_W = rng.normal(size=n) * node.child_N
        node.prior = rng.dirichlet(np.ones(n)) if rng.random() < 0.8 else np.full(n, 1.0 / n)
        node.N, node.q_init = float(node.child_N.sum()), float(rng.normal())
        node.to_play = int(rng.choice([-1, 1]))
        c = 2.0 * (math.log((1.0 + node.N + cfg.c_puct_base) / cfg.c_puct_base)
                   + cfg.c_puct_init)
        u = c * math.sqrt(max(1.0, node.N - 1.0)) * node.prior / (1.0 + node.child_N)
        score = (node.child_W + node.q_init) / (1.0 + node.child_N) * node.to_play + u
        score[~node.legal] = -np.inf
        assert node.best_action(cfg) == int(np.argmax(score))
