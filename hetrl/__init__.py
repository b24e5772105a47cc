"""hetrl: declarative deep RL experiments on heterogeneous platforms."""

from pathlib import Path
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from hetrl.agent import Agent


def load(source: str | Path, **options: Any) -> "Agent":
    """A run's trained agent, built for inference only (`hetrl.loading.load`): imported on
    first use, so that `import hetrl` stays light."""
    from hetrl.loading import load as load_agent

    return load_agent(source, **options)
