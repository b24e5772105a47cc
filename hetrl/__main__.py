"""`python -m hetrl [group=option ...] [key=value ...]`: compose a config and run one job."""

from hetrl.stopping import listen_early

# python -m hetrl notes a stop from its first line, before the job or the sweep listens (the
# `hetrl` script from cli()); imported as a library, it leaves the signals alone
EARLY = listen_early() if __name__ == "__main__" else None

import logging  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from hydra.types import RunMode  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from hetrl.checks import check_group_choices, check_inputs  # noqa: E402
from hetrl.config.errors import ConfigError  # noqa: E402
from hetrl.config.store import register  # noqa: E402
from hetrl.faults import Fault, Stopped, exit_on_stop  # noqa: E402
from hetrl.paths import CONF_DIR  # noqa: E402
from hetrl.sweep.stops import run_job  # noqa: E402
from hetrl.tracking.base import JOB_NUM_TAG  # noqa: E402

register()


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    hydra_cfg = HydraConfig.get()
    runtime = hydra_cfg.runtime
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    tags = {JOB_NUM_TAG: str(hydra_cfg.job.num)} if multirun else {}
    try:
        if EARLY is not None and EARLY.is_set() and not multirun:  # nothing exists yet
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
    global EARLY
    EARLY = EARLY or listen_early()
    try:  # before Hydra composes: it fails on these with a traceback
        check_group_choices(sys.argv[1:])
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
    exit_on_stop(main)


if __name__ == "__main__":
    cli()
