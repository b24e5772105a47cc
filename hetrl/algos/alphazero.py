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

Self-play plays with `best` (the last generation that passed gating; its games:
`hetrl.algos.go_games`); training updates `net`. `scheduler=selfplay` runs the loop.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hetrl.algos.base import Learner
from hetrl.algos.rule import Metrics, Stage
from hetrl.algos.mcts import SearchConfig
from hetrl.algos.networks import channels_last
from hetrl.algos.placement import parameters, submodules
from hetrl.config.enums import ActionSpace, Agents
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
        channels_last(self)

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
        super().__init__(device=device, hidden=[width] * blocks, lr=lr_values[0], gamma=1.0,
                         policy_hidden=None)
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
        l2 = sum((p * p).sum() for p in parameters(submodules(self.net)) if p.dim() > 1) / 2
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
