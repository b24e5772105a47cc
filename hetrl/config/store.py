"""Every schema by config group, and their registration in Hydra's ConfigStore."""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from hetrl.config.actors import ActorsConfig, ProcessActorsConfig, RayActorsConfig
from hetrl.config.algo import (
    A2CConfig,
    AlphaZeroConfig,
    D4PGConfig,
    DDPGConfig,
    DQNConfig,
    MADDPGConfig,
    MATD3Config,
    PPOConfig,
    TD3Config,
)
from hetrl.config.env import EnvConfig, GoEnvConfig, MpeEnvConfig
from hetrl.config.partitioner import (
    ComposerPartitionerConfig,
    HeftPartitionerConfig,
    IlpPartitionerConfig,
    SinglePartitionerConfig,
)
from hetrl.config.platform import HostPlatformConfig, ModeledPlatformConfig
from hetrl.config.precision import (
    HardwareAwarePrecisionConfig,
    QATPrecisionConfig,
    UniformPrecisionConfig,
)
from hetrl.config.replay import (
    LocalitySamplerConfig,
    MultiAgentReplayConfig,
    PrioritizedLocalitySamplerConfig,
    PrioritizedSamplerConfig,
    UniformReplayConfig,
    UniformSamplerConfig,
)
from hetrl.config.run import RunConfig
from hetrl.config.scheduler import (
    PearlSchedulerConfig,
    SchedulerConfig,
    SelfPlaySchedulerConfig,
)
from hetrl.config.tracking import (
    MlflowTrackingConfig,
    NullTrackingConfig,
    TensorboardTrackingConfig,
)

SCHEMAS: dict[str, dict[str, type]] = {
    "env": {"gymnasium": EnvConfig, "mpe": MpeEnvConfig, "go": GoEnvConfig},
    "algo": {"dqn": DQNConfig, "ddpg": DDPGConfig, "td3": TD3Config, "d4pg": D4PGConfig,
             "a2c": A2CConfig, "ppo": PPOConfig, "maddpg": MADDPGConfig, "matd3": MATD3Config,
             "alphazero": AlphaZeroConfig},
    "platform": {"host": HostPlatformConfig, "modeled": ModeledPlatformConfig},
    "precision": {"uniform": UniformPrecisionConfig, "mixed": HardwareAwarePrecisionConfig,
                  "qat": QATPrecisionConfig},
    "partitioner": {"ilp": IlpPartitionerConfig, "heft": HeftPartitionerConfig,
                    "single": SinglePartitionerConfig, "composer": ComposerPartitionerConfig},
    "scheduler": {"sync": SchedulerConfig, "onpolicy": SchedulerConfig,
                  "actorq": SchedulerConfig, "pearl": PearlSchedulerConfig,
                  "selfplay": SelfPlaySchedulerConfig},
    "replay": {"uniform": UniformReplayConfig, "multi_agent": MultiAgentReplayConfig},
    "replay/sampler": {"uniform": UniformSamplerConfig, "locality": LocalitySamplerConfig,
                       "prioritized": PrioritizedSamplerConfig,
                       "prioritized_locality": PrioritizedLocalitySamplerConfig},
    "actors": {"local": ActorsConfig, "process": ProcessActorsConfig, "ray": RayActorsConfig},
    "tracking": {"mlflow": MlflowTrackingConfig, "tensorboard": TensorboardTrackingConfig,
                 "none": NullTrackingConfig},
}
"""group -> schema name -> dataclass; an option's YAML names its schema as
`/schema/<group>/<name>` in its defaults list (`run_schema` is conf/config.yaml's)."""


def register() -> None:
    """Put every schema in Hydra's ConfigStore (`schema/<group>/<name>`, and `run_schema`)."""
    store = ConfigStore.instance()
    store.store(name="run_schema", node=RunConfig)
    for group, schemas in SCHEMAS.items():
        for name, node in schemas.items():
            store.store(group=f"schema/{group}", name=name, node=node)
