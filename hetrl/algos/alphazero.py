"""AlphaZero as MiniGo's MLPerf reference trains it: a residual policy/value network, MCTS
self-play (`hetrl.algos.mcts`) and MLPerf's loss.

* Network (spec C.1.9): conv3×3 stem, `blocks` residual blocks of two conv3×3 (BN after each
  conv), `width` filters; policy head conv1×1 (2 filters) → FC to N²+1; value head conv1×1
  (1 filter) → FC `width` → FC 1 → tanh. The value is from the side to move.
* Loss: policy cross-entropy against the search's visit distribution + `value_weight` (0.5) ×
  value MSE against the game's result + `l2` (1e-4) × Σw²/2 (tf.nn.l2_loss, as MiniGo).
* Optimizer: SGD with momentum 0.9 and a piecewise-constant learning rate (`lr_values`
  between `lr_boundaries`, in updates).
* Each training position is seen in one of the board's 8 symmetries, drawn at random.

Self-play plays with `best` (the last generation that passed gating); training updates
`net`. `scheduler=selfplay` runs the loop.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hetrl.algos.base import Learner
from hetrl.algos.rule import Metrics, Stage
from hetrl.algos.mcts import (
    Node,
    Search,
    SearchConfig,
    SearchStats,
    choose_move,
    inject_noise,
    run_searches,
)
from hetrl.config.enums import ActionSpace, Agents
from hetrl.envs.go import GoGame, GoPosition
from hetrl.partition.graph import TaskGraph
from hetrl.partition.steps import policy_value_step_graph


class ResidualBlock(nn.Module):
    """conv3×3 → BN → ReLU → conv3×3 → BN, plus the block's input, → ReLU. The ReLUs are
    modules so that the step's task graph and the host's per-layer timing see them."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.relu2 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu1(self.bn1(self.conv1(x)))
        return self.relu2(x + self.bn2(self.conv2(y)))


class PolicyValueNet(nn.Module):
    def __init__(self, planes: int, board_size: int, width: int, blocks: int) -> None:
        super().__init__()
        n2 = board_size * board_size
        self.stem = nn.Sequential(nn.Conv2d(planes, width, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU())
        self.trunk = nn.Sequential(*(ResidualBlock(width) for _ in range(blocks)))
        self.policy_conv = nn.Sequential(nn.Conv2d(width, 2, 1, bias=False), nn.BatchNorm2d(2),
                                         nn.ReLU())
        self.policy_fc = nn.Linear(2 * n2, n2 + 1)
        self.value_conv = nn.Sequential(nn.Conv2d(width, 1, 1, bias=False), nn.BatchNorm2d(1),
                                        nn.ReLU())
        self.value_fc = nn.Sequential(nn.Linear(n2, width), nn.ReLU(), nn.Linear(width, 1),
                                      nn.Tanh())

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(self.stem(x))
        logits = self.policy_fc(self.policy_conv(h).flatten(1))
        value = self.value_fc(self.value_conv(h).flatten(1)).squeeze(1)
        return logits, value


def symmetry(x: torch.Tensor, k: int) -> torch.Tensor:
    """One of the 8 symmetries of the square on the last two dims (k in 0..7)."""
    if k >= 4:
        x = x.flip(-1)
    return torch.rot90(x, k % 4, dims=(-2, -1))


def augment(planes: torch.Tensor, pi: torch.Tensor, n: int,
            ks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row of (planes, pi) in the symmetry ks[row] (the pass stays where it is): every
    symmetry of the batch, each row's picked (no shape depends on ks: it compiles as one
    graph)."""
    rows = torch.arange(len(planes), device=planes.device)
    ks = ks.to(planes.device)
    planes = torch.stack([symmetry(planes, k) for k in range(8)])[ks, rows]
    boards = pi[:, :-1].reshape(-1, n, n)
    boards = torch.stack([symmetry(boards, k) for k in range(8)])[ks, rows]
    return planes, torch.cat([boards.reshape(len(pi), -1), pi[:, -1:]], dim=1)


class PositionBatch(NamedTuple):
    """Training positions: what `AlphaZero.update` takes."""

    planes: torch.Tensor  # (B, planes, N, N) uint8
    pis: torch.Tensor  # (B, N*N+1) float32: the search's visit distributions
    zs: torch.Tensor  # (B,) float32: the result for the side to move

    @property
    def weights(self) -> None:
        """Never prioritized: the update step hands back no priorities."""
        return None


class AlphaZero(Learner):
    """The network, its optimizer and the search parameters self-play uses."""

    action_space = ActionSpace.discrete
    agents = Agents.game
    policy_attr = "best"

    def __init__(self, *, obs_space: gym.spaces.Box, act_space: gym.spaces.Discrete,
                 device: torch.device, width: int, blocks: int, batch_size: int,
                 lr_values: list[float], lr_boundaries: list[int], momentum: float,
                 l2: float, value_weight: float, search: dict[str, Any],
                 **_: Any) -> None:
        super().__init__(device=device, hidden=[width] * blocks, lr=lr_values[0], gamma=1.0)
        # what another process needs to make the same learner (data-parallel trainers)
        self.init_kwargs = {"obs_shape": tuple(obs_space.shape), "num_actions": int(act_space.n),
                                "width": width, "blocks": blocks, "batch_size": batch_size,
                                "lr_values": list(lr_values), "lr_boundaries": list(lr_boundaries),
                                "momentum": momentum, "l2": l2, "value_weight": value_weight,
                                "search": dict(search)}
        planes, n, _ = obs_space.shape
        self.board_size, self.planes = n, planes
        self.width, self.blocks = width, blocks
        self.batch_size = batch_size
        self.lr_values, self.lr_boundaries = list(lr_values), list(lr_boundaries)
        self.l2, self.value_weight = l2, value_weight
        self.search = SearchConfig(**search)
        self.net = PolicyValueNet(planes, n, width, blocks).to(device)
        self.best = PolicyValueNet(planes, n, width, blocks).to(device)
        self.best.load_state_dict(self.net.state_dict())
        self.best.eval()
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=lr_values[0],
                                         momentum=momentum)
        self.generation = 0  # of `best`
        # what `update` runs instead of `net` (`trained_through`); set in __dict__, not as a
        # submodule: neither checkpointed nor counted among the learner's parameters
        vars(self)["_trained_through"] = None

    def task_graph(self, batch_size: int) -> TaskGraph:
        """One `update` as a task graph: the residual tower and both heads forward, the loss,
        backward through the heads and the tower, and a momentum-SGD step per layer."""
        return policy_value_step_graph(self.net, batch_size, (self.planes, self.board_size,
                                                              self.board_size))

    def random_batch(self, n: int, rng: np.random.Generator,
                     device: torch.device) -> PositionBatch:
        """A batch of the kind `update` takes, drawn from `rng` (for timing the step: only
        its shapes and dtypes matter): 0/1 planes, visit distributions, results ±1."""
        planes = rng.integers(0, 2, size=(n, self.planes, self.board_size, self.board_size),
                              dtype=np.uint8)
        num_actions = self.board_size * self.board_size + 1
        pis = rng.dirichlet(np.ones(num_actions), size=n).astype(np.float32)
        zs = rng.choice(np.array([-1.0, 1.0], np.float32), size=n)
        return PositionBatch(*(torch.from_numpy(a).to(device) for a in (planes, pis, zs)))

    def lr_at(self, update: int) -> float:
        return self.lr_values[bisect.bisect_right(self.lr_boundaries, update)]

    def act(self, obs: np.ndarray, step: int | None) -> np.ndarray:
        """The raw policy's move (no search; the loop plays with search)."""
        with torch.no_grad():
            logits, _ = self.best(self.obs_tensor(obs))
        return logits.argmax(dim=1).cpu().numpy()

    @contextmanager
    def trained_through(self, model: nn.Module) -> Iterator[None]:
        """`update` runs `model` (`net` wrapped in DDP, which averages the gradients over
        the ranks) inside the block. The learner drops it afterwards: a rank must drop its
        DDP module before it leaves the process group (`dataparallel.leave_group`)."""
        vars(self)["_trained_through"] = model
        try:
            yield
        finally:
            vars(self)["_trained_through"] = None

    def stages(self) -> list[Stage]:
        """One momentum-SGD step on MLPerf's loss, through `net` (or the module of
        `trained_through`)."""
        return [Stage("optimizer", lambda batch, count: self.losses(batch, self._trained_through))]

    def update(self, batch: PositionBatch) -> Metrics:
        """One step on a batch of positions, at the learning rate of `self.updates`."""
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(self.updates)
        return super().update(batch)

    def losses(self, batch: PositionBatch | tuple[torch.Tensor, ...],
               model: nn.Module | None = None, augmented: bool = True,
               train: bool = True) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """MLPerf's loss on a batch, each row in a random symmetry (unless not `augmented`);
        `train=False` normalizes with BN's running statistics (a loss that is a mean over
        rows, whatever the batch: what the data-parallel test compares)."""
        planes, pi, z = batch
        planes = planes.float()
        if augmented:
            planes, pi = augment(planes, pi, self.board_size, torch.randint(8, (len(planes),)))
        model = self.net if model is None else model
        model.train(train)
        logits, value = model(planes.to(self.device))
        pi, z = pi.to(self.device), z.to(self.device)
        policy_loss = -(pi * F.log_softmax(logits, dim=1)).sum(dim=1).mean()
        value_loss = F.mse_loss(value, z)
        l2 = sum((p * p).sum() for n, p in self.net.named_parameters() if p.dim() > 1) / 2
        loss = policy_loss + self.value_weight * value_loss + self.l2 * l2
        return loss, {"loss": loss.detach(), "policy_loss": policy_loss.detach(),
                      "value_loss": value_loss.detach(), "l2": l2.detach()}

    def accept(self) -> None:
        """`net` passed gating: self-play now plays with it."""
        self.best.load_state_dict(self.net.state_dict())
        self.generation += 1

    def checkpoint(self) -> dict[str, Any]:
        return {**super().checkpoint(), "generation": self.generation}

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self.generation = state.get("generation", 0)


def make_learner(obs_shape: tuple, num_actions: int, **kwargs: Any) -> AlphaZero:
    """An AlphaZero learner on the CPU from `AlphaZero.init_kwargs` (in another process)."""
    return AlphaZero(obs_space=gym.spaces.Box(0.0, 1.0, obs_shape, np.float32),
                     act_space=gym.spaces.Discrete(num_actions), device=torch.device("cpu"),
                     **kwargs)


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
