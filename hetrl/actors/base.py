"""Where acting happens and in which precision: `actors=local` is this base itself (the learner
acts in its own process); the actor pools (hetrl.actors.pool) act elsewhere."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

from hetrl.quant.spec import QuantSpec


@dataclass(frozen=True)
class Acting:
    """Where an actors option acts, declared once on its class (validation reads it)."""

    pool: bool = False
    """A pool of actors that a loop drives (a loop whose needs say `actor_pool`)."""
    ray: bool = False
    """On Ray: a loop that places workers of its own (`LoopNeeds.ray_workers`) places them there."""


class Actors:
    """The actors' precision, `spec`: a pool's actors act in it, and the final policy is
    evaluated in it next to fp32 on `eval_episodes` episodes (`ptq_reward_error_pct`; all
    that `spec` does when the learner acts itself, under the sync and on-policy schedulers)."""

    acting: ClassVar[Acting] = Acting()

    def __init__(self, precision: str, int8_mode: str, per_channel: bool,
                 eval_episodes: int) -> None:
        self.spec = QuantSpec(precision, int8_mode, per_channel)
        self.eval_episodes = eval_episodes


class Workers(Protocol):
    """Workers a loop drives besides the actors option (self-play's pool): made by build(),
    not started; the loop starts them, asks where they run, and closes them however far it
    got (a pool not started closes as one that was)."""

    def start(self) -> None:
        ...

    def placement(self) -> dict[int, str]:
        ...

    def close(self) -> None:
        ...
