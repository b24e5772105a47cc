"""The loop contract: a training loop runs on what the job built (`Training`) from its
progress (`LoopState`), and declares once, as a `LoopNeeds`, what it needs of the other
config groups. Validation reads the needs and words its messages from them, so a new loop
is one module and one YAML."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar, Protocol

from hetrl.config.enums import Agents

if TYPE_CHECKING:
    import gymnasium as gym

    from hetrl.actors.base import Actors, Workers
    from hetrl.algos.base import Learner
    from hetrl.scheduler.context import Training
    from hetrl.scheduler.state import LoopState

WorkersMaker = Callable[["Loop", "Actors", "Learner", "gym.vector.VectorEnv", int],
                        "Workers | None"]
"""What makes a loop's own workers from the loop, the actors option, the learner, the envs
and the seed: None where the loop has none (it plays in its own process)."""


@dataclass(frozen=True)
class LoopNeeds:
    """What a loop needs of the other groups; each default is the common loop's."""

    on_policy: bool = False
    """It trains on-policy algos (on their own rollouts), else off-policy ones (a replay)."""
    agents: tuple[Agents, ...] = (Agents.single,)
    """The kinds of env it steps."""
    actor_pool: bool = False
    """It drives an actor pool (actors=process|ray), else it acts in the learner's process."""
    replay: bool = True
    """It stores its data in the `replay` option, else it keeps its own (an unused replay
    must still build beside the env's spaces)."""
    ray_workers: str | None = None
    """The key counting the workers it places on Ray itself with a Ray actors option (which
    then needs at least one), if it places any."""
    workers: WorkersMaker | None = None
    """What makes its own workers, if it has any (self-play's): build() makes them, as it
    makes the actors, and the loop starts them (`Training.workers`)."""
    trainer_ranks: str | None = None
    """The key counting its data-parallel trainer ranks, if it has them: the ranks besides
    rank 0 train in float32, so more than one needs a float32 precision."""
    episode_returns: bool = True
    """Its episodes have returns (return_mean_100), on which `stop_return` can end it."""


class Loop(Protocol):
    """A training loop: `needs` declared on its class, `run` until the budget is spent (or a
    stop), returning the final metrics. Its steps are methods named as its paper names them."""

    needs: ClassVar[LoopNeeds]

    def run(self, t: Training, state: LoopState) -> dict[str, float]:
        ...


def needs_of(loop: type) -> LoopNeeds:
    """A loop class's declared needs; a TypeError naming the class when it declares none."""
    needs = getattr(loop, "needs", None)
    if not isinstance(needs, LoopNeeds):
        raise TypeError(f"{loop.__module__}.{loop.__qualname__} declares no `needs: LoopNeeds` "
                        "(hetrl.scheduler.base): a loop says once what it needs of the other "
                        "groups")
    return needs
