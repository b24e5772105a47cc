"""Env schemas: gymnasium envs and PettingZoo MPE envs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import MISSING

from hetrl.config.enums import ActionSpace, Agents, ReturnDefinition
from hetrl.config.errors import require

MAX_AGENTS = 64
"""The most learning agents an MPE env may have. Each agent's critic takes every agent's
observation and action, and an agent's observation grows with the number of entities, so
the critics' weights and a replay row grow as n² per agent (n³ in all) and each env step
checks every pair of entities: the MARL paper's largest config has 24 agents, 64 is within
one machine's memory (1000 agents ran 80 s before failing in the allocator)."""


@dataclass
class EnvConfig:
    _target_: str = MISSING
    id: str = MISSING
    action_space: ActionSpace = MISSING
    n_envs: int = 1
    # gymnasium's vectorization modes: sync | async | vector_entry_point (the env's own
    # batched implementation, e.g. ale-py's AtariVectorEnv)
    vectorization: str = "sync"
    clip_rewards: bool = False  # the learner sees sign-clipped rewards; returns stay the score
    flatten_observation: bool = False  # Dict observations (DM Control) -> one flat Box
    kwargs: dict[str, Any] = field(default_factory=dict)
    agents: Agents = Agents.single

    def __post_init__(self) -> None:
        require(self.n_envs >= 1, "env.n_envs", self.n_envs, "integers >= 1")
        modes = ("sync", "async", "vector_entry_point")
        require(self.vectorization in modes, "env.vectorization", self.vectorization,
                ", ".join(repr(m) for m in modes))


@dataclass
class MpeEnvConfig:
    """A PettingZoo MPE env of mpe2 (`id` names its module, e.g. simple_tag_v3).

    `n_agents` counts the learning agents as the MARL paper names its configs: predators in
    simple_tag (prey and obstacles follow as max(1, n/3) and max(2, n/3), extract E.2),
    agents (and as many landmarks) in simple_spread. Every agent, prey included, is trained.
    """

    _target_: str = MISSING
    id: str = MISSING
    action_space: ActionSpace = ActionSpace.discrete
    agents: Agents = Agents.multi
    n_agents: int = 3
    n_envs: int = 1
    max_cycles: int = 25  # episode length
    returns: ReturnDefinition = ReturnDefinition.team_sum  # what return_mean_100 sums
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        require(1 <= self.n_agents <= MAX_AGENTS, "env.n_agents", self.n_agents,
                f"integers in [1, {MAX_AGENTS}] (the critics and replay rows grow as "
                "n_agents² per agent)")
        require(self.n_envs >= 1, "env.n_envs", self.n_envs, "integers >= 1")
        require(self.max_cycles >= 1, "env.max_cycles", self.max_cycles, "integers >= 1")
        require(self.action_space == ActionSpace.discrete, "env.action_space",
                self.action_space.value, "'discrete' (MPE's 5 moves)")
        require(self.agents == Agents.multi, "env.agents", self.agents.value, "'multi'")


@dataclass
class GoEnvConfig:
    """Go on OpenSpiel's engine (`hetrl.envs.go`): Tromp-Taylor area scoring with `komi`,
    positional superko; the input planes are `history` own/opponent stone pairs, to-play
    and (with `liberties`) 1/2/3+ liberty planes. Learned by self-play (algo=alphazero)."""

    _target_: str = MISSING
    id: str = MISSING  # a name for messages (go9, ...)
    board_size: int = MISSING
    komi: float = 7.5
    history: int = 4
    liberties: bool = True
    max_moves: Optional[int] = None  # None: OpenSpiel's 2 * N * N
    action_space: ActionSpace = ActionSpace.discrete
    agents: Agents = Agents.game
    n_envs: int = 1

    def __post_init__(self) -> None:
        require(5 <= self.board_size <= 19, "env.board_size", self.board_size,
                "integers in [5, 19]")
        require(self.history >= 1, "env.history", self.history, "integers >= 1")
        require(self.n_envs == 1, "env.n_envs", self.n_envs, "1 (self-play plays its own games)")
        require(self.agents == Agents.game, "env.agents", self.agents.value, "'game'")
