"""`python -m hetrl [group=option ...] [key=value ...]`: compose a config and run one job."""

import logging
import traceback
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from hetrl import CONF_DIR
from hetrl.config.errors import ConfigError
from hetrl.config.store import register

register()


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    from hetrl import experiment  # after Hydra parsed the command line: --help stays fast

    runtime = HydraConfig.get().runtime
    try:
        return experiment.run(cfg, runtime.choices, Path(runtime.output_dir))
    except ConfigError:  # the terminal gets Hydra's one-message report; the log the traceback
        _to_log_files(traceback.format_exc())
        raise


def _to_log_files(text: str) -> None:
    """Write `text` to the job's log files (the root logger's file handlers) only."""
    record = logging.makeLogRecord({"name": "hetrl", "levelno": logging.ERROR,
                                    "levelname": "ERROR", "msg": text})
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


if __name__ == "__main__":
    main()
