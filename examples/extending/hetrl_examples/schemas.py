"""The examples' typed schemas, and their registration in Hydra's ConfigStore.

An option's YAML names its schema in its defaults list (`/schema/<group>/<name>@_here_`),
so the schema must be in the ConfigStore before Hydra composes. Inside the repo that is a
dataclass in `hetrl/config/<group>.py` and one line in `hetrl.config.store.SCHEMAS`; from
outside it is `register()` below, called before composing (`python -m hetrl` calls it through
`hydra_plugins/hetrl_examples.py`). Importing this module imports no torch, so
`python -m hetrl --help` stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore
from omegaconf import II, MISSING

from hetrl.config.algo import AlgoConfig
from hetrl.config.errors import require


@dataclass
class ExpectedSarsaConfig(AlgoConfig):
    """The keys every off-policy algo has (AlgoConfig), and Expected SARSA's own."""

    target_epsilon: float = MISSING  # epsilon of the policy the TD target averages over
    target_update_interval: int = MISSING  # in gradient updates
    exploration_fraction: float = MISSING
    exploration_initial_eps: float = MISSING
    exploration_final_eps: float = MISSING
    total_steps: int = II("steps")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.target_update_interval >= 1, "algo.target_update_interval",
                self.target_update_interval, "integers >= 1")
        for key in ("target_epsilon", "exploration_fraction", "exploration_initial_eps",
                    "exploration_final_eps"):
            value = getattr(self, key)
            require(0 <= value <= 1, f"algo.{key}", value, "floats in [0, 1]")


@dataclass
class RecentSamplerConfig:
    _target_: str = MISSING
    window: int = MISSING  # how many of the newest transitions a batch is drawn from

    def __post_init__(self) -> None:
        require(self.window >= 1, "replay.sampler.window", self.window, "integers >= 1")


SCHEMAS: dict[str, dict[str, type]] = {
    "algo": {"expected_sarsa": ExpectedSarsaConfig},
    "replay/sampler": {"recent": RecentSamplerConfig},
}
"""group -> schema name -> dataclass, as `hetrl.config.store.SCHEMAS`."""


def register() -> None:
    """Put the examples' schemas in Hydra's ConfigStore (`schema/<group>/<name>`)."""
    store = ConfigStore.instance()
    for group, schemas in SCHEMAS.items():
        for name, node in schemas.items():
            store.store(group=f"schema/{group}", name=name, node=node)
