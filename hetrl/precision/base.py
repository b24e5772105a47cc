"""What the build and the loops call on a precision option."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar, Protocol

if TYPE_CHECKING:
    import torch

    from hetrl.algos.base import Learner
    from hetrl.partition.costs import Plan
    from hetrl.partition.graph import Node, TaskGraph


@dataclass(frozen=True)
class PrecisionNeeds:
    """What a precision needs of the other groups, declared once on its class (validation
    reads it)."""

    plan: bool = False
    """It runs each layer in the dtype its plan chose: a modeled platform, or the host
    measuring a learner that describes its task graph."""
    travels: bool = True
    """The learner it sets up can be copied whole into an actor pool's processes."""


class Precision(Protocol):
    """The dtypes a learner's update computes in: chosen per node for planning
    (`dtype_chooser`), set up on the learner once (`apply`), entered around each update
    (`autocast`); the host times each layer in `host_dtypes`."""

    needs: ClassVar[PrecisionNeeds]

    @property
    def host_dtypes(self) -> tuple[str, ...]:
        """The dtypes the host measures each layer pass in."""
        ...

    def dtype_chooser(self, platform: object) -> Callable[[Node, str], str]:
        """The dtype name of each node on each device of `platform`."""
        ...

    def apply(self, learner: Learner, graph: TaskGraph | None, plan: Plan | None,
              platform: object) -> None:
        """Set the learner up to compute in the chosen dtypes (per layer, loss scaling)."""
        ...

    def autocast(self, device: torch.device) -> AbstractContextManager:
        """The context each update runs in."""
        ...
