"""`python -m hetrl [group=option ...] [key=value ...]`: compose a config and run one job."""

from hetrl.stopping import listen_early

EARLY = listen_early()  # from the first moment: a stop before the job listens is noted too

import logging
import sys
import traceback
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from hetrl import CONF_DIR
from hetrl.config.checks import check_inputs
from hetrl.config.errors import ConfigError
from hetrl.config.store import register
from hetrl.faults import Fault, Stopped, exit_on_stop
from hetrl.sweep_stops import run_job
from hetrl.tracking.base import JOB_NUM_TAG

register()


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    hydra_cfg = HydraConfig.get()
    runtime = hydra_cfg.runtime
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    tags = {JOB_NUM_TAG: str(hydra_cfg.job.num)} if multirun else {}
    try:
        if EARLY.is_set() and not multirun:  # while Hydra composed: nothing exists yet
            raise Stopped(EARLY.signum)
        if not cfg.resume:  # before torch, MLflow and the envs are imported: fails fast
            check_inputs(cfg, runtime.choices)
        from hetrl import experiment  # after Hydra parsed the command line: --help stays fast

        return run_job(hydra_cfg, lambda: experiment.run(
            cfg, runtime.choices, Path(runtime.output_dir),
            overrides=list(hydra_cfg.overrides.task), tags=tags))
    except (ConfigError, Fault) as error:
        _to_log_files(traceback.format_exc())  # the terminal gets one message
        job = f"job {hydra_cfg.job.num}: " if multirun else ""
        print(f"error: {job}{error}", file=sys.stderr)
        if multirun:
            raise  # the sweep records the failed job and goes on
        sys.exit(1)


def _to_log_files(text: str) -> None:
    """Write `text` to the job's log files (the root logger's file handlers) only."""
    record = logging.makeLogRecord({"name": "hetrl", "levelno": logging.ERROR,
                                    "levelname": "ERROR", "msg": text})
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def cli() -> None:
    """Run `main`; a stop by Ctrl-C or SIGTERM exits 130 or 143 with one line saying how to go
    on, not a traceback."""
    exit_on_stop(main)


if __name__ == "__main__":
    cli()
