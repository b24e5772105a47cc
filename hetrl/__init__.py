"""hetrl: declarative deep RL experiments on heterogeneous platforms."""

from pathlib import Path

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
"""The Hydra config tree shipped beside the package (the repo's `conf/`)."""

__version__ = "0.1.0"
