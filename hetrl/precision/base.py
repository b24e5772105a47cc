"""What the build and the loops call on a precision option."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    import torch

    from hetrl.algos.base import Learner
    from hetrl.partition.costs import Plan
    from hetrl.partition.graph import Node, TaskGraph


class Precision(Protocol):
    """The dtypes a learner's update computes in: chosen per node for planning
    (`dtype_chooser`), set up on the learner once (`apply`), entered around each update
    (`autocast`)."""

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
