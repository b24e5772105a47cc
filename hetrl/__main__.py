"""`python -m hetrl [group=option ...] [key=value ...]`: compose a config and run one job."""

from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from hetrl import CONF_DIR
from hetrl.config.store import register

register()


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    from hetrl import experiment  # after Hydra parsed the command line: --help stays fast

    runtime = HydraConfig.get().runtime
    return experiment.run(cfg, runtime.choices, Path(runtime.output_dir))


if __name__ == "__main__":
    main()
