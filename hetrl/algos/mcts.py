"""MiniGo's MCTS with leaf evaluations batched across many concurrent games.

Values are from black's side (+1: black wins), as in MiniGo's `mcts.py`. A node keeps its
children's statistics in arrays: visits N, total value W and prior P. The search picks
argmax(Q·to_play + U) with MiniGo's PUCT (spec C.1.9):

    U = 2·(ln((1 + N_p + c_base) / c_base) + c_init) · √max(1, N_p − 1) · P_a / (1 + N_a)
    Q_a = (W_a + q_init) / (1 + N_a)      (an unvisited child is worth its parent's value,
                                           less value_init_penalty for the mover)

Each round, every game still searching selects `virtual_losses` leaves (each leaf on its way
down takes a virtual loss, so the next one goes elsewhere); the leaves of all games go to
the network as one batch (minigo's `concurrent_games_per_thread`, KataGo's network server),
and each leaf is expanded and its value backed up. A game's search is the same whether it is
batched with other games or alone: the leaves of one game depend only on its own tree.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from types import SimpleNamespace

import numpy as np

from hetrl.config.algo import SearchSchema
from hetrl.envs.go import GoGame, GoPosition

Evaluator = Callable[[Sequence[GoPosition]], tuple[np.ndarray, np.ndarray]]
"""positions -> (priors (B, N*N+1), values (B,) from black's side)."""


@dataclass
class SearchConfig(SearchSchema):
    """MiniGo's search parameters (spec C.1.9), with their defaults and checks where the
    config declares them (`hetrl.config.algo.SearchSchema`), and the values they imply on a
    board; readouts per move are `readouts` on full moves and `fast_readouts` on fast ones
    (playout-cap randomization)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _kernels()  # loaded (or compiled) now, not in the first search

    def alpha(self, game: GoGame) -> float:
        return self.dirichlet_alpha or 0.03 * 361 / game.num_actions

    def softpicks(self, game: GoGame) -> int:
        if self.softpick_moves is not None:
            return self.softpick_moves
        return (game.n * game.n // 12) // 2 * 2


class Node:
    """A position in the tree; its children's statistics live in its arrays."""

    __slots__ = (
        "N",
        "action",
        "child_N",
        "child_W",
        "children",
        "legal",
        "parent",
        "pending",
        "pos",
        "prior",
        "q_init",
        "to_play",
    )

    def __init__(self, pos: GoPosition, parent: Node | None = None, action: int = -1) -> None:
        self.pos, self.parent, self.action = pos, parent, action
        self.children: dict[int, Node] = {}
        self.N = 0.0
        self.to_play = pos.to_play
        self.legal: np.ndarray | None = None  # set on expansion
        self.prior = self.child_N = self.child_W = None
        self.q_init = 0.0
        self.pending = False  # selected this round, waiting for the network

    @property
    def expanded(self) -> bool:
        return self.legal is not None

    @property
    def Q(self) -> float:
        """Mean value of this node (black's side), from its parent's view of it."""
        if self.parent is None:
            total = float(self.child_W.sum()) if self.expanded else 0.0
            return total / max(self.N, 1.0)
        p = self.parent
        return float((p.child_W[self.action] + p.q_init) / (1.0 + p.child_N[self.action]))

    def best_action(self, cfg: SearchConfig) -> int:
        """argmax over the legal children of Q·to_play + U (the first of equal ones)."""
        n_p = self.N
        c = 2.0 * (math.log((1.0 + n_p + cfg.c_puct_base) / cfg.c_puct_base) + cfg.c_puct_init)
        return _kernels().best_action(self.prior, self.child_N, self.child_W, self.legal,
                                      c * math.sqrt(max(1.0, n_p - 1.0)), self.q_init,
                                      float(self.to_play))

    def expand(self, prior: np.ndarray, value: float, cfg: SearchConfig) -> None:
        legal = self.pos.legal_mask()
        if cfg.pass_when_done and (legal[:-1] & ~self.pos.own_eyes()).any():
            legal[-1] = False  # pass: the last action
        prior = np.where(legal, prior, 0.0).astype(np.float64)
        total = prior.sum()
        self.prior = prior / total if total > 0 else legal / legal.sum()
        self.legal = legal
        self.child_N = np.zeros(len(prior))
        self.child_W = np.zeros(len(prior))
        self.q_init = value - cfg.value_init_penalty * self.to_play

    def child(self, action: int) -> Node:
        node = self.children.get(action)
        if node is None:
            node = self.children[action] = Node(self.pos.play(action), self, action)
        return node

    def visits(self) -> np.ndarray:
        return self.child_N.copy()

    def search_policy(self) -> np.ndarray:
        """The visit distribution; the prior where no child was visited yet (one readout
        expands only the root)."""
        visits = self.child_N
        total = visits.sum()
        return visits / total if total > 0 else self.prior.copy()


def _best_action_loop(prior: np.ndarray, child_N: np.ndarray, child_W: np.ndarray,
                      legal: np.ndarray, u_scale: float, q_init: float, to_play: float) -> int:
    """PUCT's argmax, compiled: per child, in numpy's order of operations,
    (W + q_init) / (1 + N) · to_play + u_scale · P / (1 + N)."""
    best, best_score = -1, -np.inf
    for a in range(prior.shape[0]):
        if legal[a]:
            visits = 1.0 + child_N[a]
            score = (child_W[a] + q_init) / visits * to_play + u_scale * prior[a] / visits
            if score > best_score:
                best, best_score = a, score
    return best


@cache
def _kernels() -> SimpleNamespace:
    """The jitted kernels, made and run once on first use (`cache=True`: compiled once, then
    loaded from numba's cache by every process)."""
    import numba

    kernels = SimpleNamespace(best_action=numba.njit(cache=True, nogil=True)(_best_action_loop))
    one = np.zeros(1)
    kernels.best_action(one, one, one, np.ones(1, dtype=bool), 1.0, 0.0, 1.0)
    return kernels


def select_leaf(root: Node, cfg: SearchConfig) -> Node:
    """The leaf PUCT descends to. As MiniGo's search does, a node whose last move was a pass
    reads the reply pass first (it ends the game, scored exactly): without it, a player who
    passes first never sees that the count loses, and self-play can settle into games that one
    side ends early by passing while the other plays on."""
    node = root
    pass_action = root.pos.game.pass_action
    while node.expanded and not node.pos.is_terminal():
        if node.pos.last == pass_action and node.child_N[pass_action] == 0:
            node = node.child(pass_action)
        else:
            node = node.child(node.best_action(cfg))
    return node


def add_virtual_loss(leaf: Node, n: float) -> None:
    node = leaf
    while node.parent is not None:
        p = node.parent
        p.child_N[node.action] += n
        p.child_W[node.action] -= n * p.to_play  # a loss for the mover who chose it
        p.N += n
        node = p


def backup(leaf: Node, value: float) -> None:
    node = leaf
    node.N += 1.0
    while node.parent is not None:
        p = node.parent
        p.child_N[node.action] += 1.0
        p.child_W[node.action] += value
        p.N += 1.0
        node = p


def inject_noise(root: Node, cfg: SearchConfig, rng: np.random.Generator) -> None:
    legal = np.flatnonzero(root.legal)
    noise = rng.dirichlet([cfg.alpha(root.pos.game)] * len(legal))
    prior = root.prior * (1.0 - cfg.noise_mix)
    prior[legal] += cfg.noise_mix * noise
    root.prior = prior


@dataclass
class Search:
    """One game's search for one move: its root, how many readouts it wants, whether the
    root still needs its Dirichlet noise."""

    root: Node
    readouts: int
    noise: bool = False
    rng: np.random.Generator = field(default_factory=np.random.default_rng)
    count: int = 0  # readouts done (leaves evaluated, terminal positions reached)

    def done(self) -> bool:
        return self.count >= self.readouts or self.root.pos.is_terminal()


@dataclass
class SearchStats:
    leaves: int = 0  # leaf evaluations by the network
    batches: int = 0  # network calls

    @property
    def mean_batch(self) -> float:
        return self.leaves / self.batches if self.batches else 0.0


def run_searches(searches: list[Search], evaluate: Evaluator, cfg: SearchConfig,
                 stats: SearchStats | None = None) -> None:
    """Search every game to its readouts, the leaves of all games in one batch a round."""
    active = [s for s in searches if not s.done()]
    while active:
        leaves: list[tuple[Search, Node]] = []
        for s in active:
            for _ in range(cfg.virtual_losses):
                leaf = select_leaf(s.root, cfg)
                if leaf.pos.is_terminal():
                    backup(leaf, float(leaf.pos.winner()))
                    s.count += 1
                elif leaf.pending:  # this round already waits on it
                    break
                else:
                    leaf.pending = True
                    add_virtual_loss(leaf, 1.0)
                    leaves.append((s, leaf))
                    s.count += 1
                if s.done():
                    break
        if leaves:
            priors, values = evaluate([leaf.pos for _, leaf in leaves])
            if stats is not None:
                stats.leaves += len(leaves)
                stats.batches += 1
            for (s, leaf), prior, value in zip(leaves, priors, values):
                add_virtual_loss(leaf, -1.0)
                leaf.pending = False
                leaf.expand(prior, float(value), cfg)
                backup(leaf, float(value))
                if s.noise and leaf is s.root:
                    inject_noise(s.root, cfg, s.rng)
                    s.noise = False
        active = [s for s in active if not s.done()]


def eval_config(cfg: SearchConfig, readouts: int) -> SearchConfig:
    """`cfg` at `readouts` readouts a move: the search an evaluation plays with."""
    return replace(cfg, readouts=readouts)


def choose_move(policy: np.ndarray, moves: int, softpicks: int,
                rng: np.random.Generator) -> int:
    """The move a search plays, in self-play and in every evaluation (the job's, the
    ladder's, `hetrl.load`'s agents): the first `softpicks` moves of a game (`moves` played so
    far) drawn from the visit distribution `policy`, so that two deterministic players do not
    replay one game over and over, then the most visited."""
    if moves < softpicks:
        return int(rng.choice(len(policy), p=policy))
    return int(np.argmax(policy))


def search_position(pos: GoPosition, evaluate: Evaluator, cfg: SearchConfig,
                    readouts: int | None = None) -> Node:
    """A plain search of one position (no noise): the root, its visits in `child_N`."""
    root = Node(pos)
    run_searches([Search(root, readouts or cfg.readouts)], evaluate, cfg)
    return root
