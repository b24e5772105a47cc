"""The sweep report: the Pareto front of speedup against reward error, EPS per platform
(modeled beside measured, PEARL's Φ), learning curves over seeds, the phase breakdown and a
table of what varies, logged to a sweep's parent run as PNGs and one HTML page (`report/`).
Made when a sweep ends (hetrl.sweep.mlflow) and by `python -m hetrl.report`."""

from hetrl.report.make import log_report, write_report
from hetrl.report.pareto import pareto_front

__all__ = ["log_report", "pareto_front", "write_report"]
