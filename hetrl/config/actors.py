"""Actors schemas: where acting happens and the precision of the actors' policy copy."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from omegaconf import MISSING

from hetrl.config.enums import ActorPrecision, Int8Mode
from hetrl.config.errors import require


@dataclass
class ActorsConfig:
    """Where the actors run and the precision `q` of their policy copy (ActorQ); with the
    sync and on-policy schedulers (`actors=local`) acting stays in the learner's process and
    `precision` is that of the final-policy evaluation (PTQ, `ptq_reward_error_pct`).
    Actor pools (process, ray) subclass this and add their own fields."""

    _target_: str = MISSING
    # strings, not enums, so that a bad value is a ConfigError naming the choices
    precision: str = "fp32"  # fp32 | fp16 | int8
    int8_mode: str = "kernel"  # paper | kernel
    per_channel: bool = True  # one scale per output channel of a convolution
    eval_episodes: int = 20  # episodes of the PTQ evaluation (fp32 and quantized, same seeds)

    def __post_init__(self) -> None:
        require(self.precision in {p.value for p in ActorPrecision}, "actors.precision",
                self.precision, str([p.value for p in ActorPrecision]))
        require(self.int8_mode in {m.value for m in Int8Mode}, "actors.int8_mode",
                self.int8_mode, str([m.value for m in Int8Mode]))
        require(self.eval_episodes >= 1, "actors.eval_episodes", self.eval_episodes,
                "integers >= 1")


@dataclass
class ActorPoolConfig(ActorsConfig):
    """ActorQ's actors (scheduler=actorq): `n` of them, each pulling the policy every
    `pull_every` of its env steps; the weights are quantized on the learner's side before
    they are sent (q_c, a compressed message) or on the actor's side after (q)."""

    n: int = 2
    pull_every: int = 1000  # actor env steps between pulls (QuaRL: 1000, 100, 30)
    quantize_on: str = "learner"  # learner (q_c) | actor (q)
    # seconds an actor may take to answer a chunk (its first one includes its start) before
    # the run fails naming it as hung
    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.n >= 1, "actors.n", self.n, "integers >= 1")
        require(self.timeout_s > 0 and math.isfinite(self.timeout_s), "actors.timeout_s",
                self.timeout_s, "finite seconds > 0")
        require(self.pull_every >= 1, "actors.pull_every", self.pull_every, "integers >= 1")
        require(self.quantize_on in ("learner", "actor"), "actors.quantize_on",
                self.quantize_on, "'learner' (q_c) or 'actor' (q)")


@dataclass
class ProcessActorsConfig(ActorPoolConfig):
    # multiprocessing: auto (fork while this process has not initialised CUDA, else spawn) |
    # spawn | forkserver | fork
    start_method: str = "auto"
    # niceness each actor process adds to its own (os.nice): where the learner's process and
    # an actor share a core, the learner runs first and the actor takes what it leaves (on 2
    # cores PEARL's DQN-CartPole at batch 32 made 1.14-1.16x the EPS at 10 than at 0). Ray
    # runs its actors at its own niceness (RAY_worker_niceness, 15)
    nice: int = 10

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.start_method in ("auto", "spawn", "forkserver", "fork"),
                "actors.start_method", self.start_method,
                "'auto', 'spawn', 'forkserver' or 'fork'")
        require(0 <= self.nice <= 19, "actors.nice", self.nice, "integers 0 to 19")


@dataclass
class RayActorsConfig(ActorPoolConfig):
    address: Optional[str] = None  # null: start Ray here; "auto" or "ray://host:port": a cluster
