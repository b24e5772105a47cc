"""`python -m hetrl.report <sweep dir | parent run id> [--tracking-uri URI] [--out DIR]`: make
a sweep's report again and log it to its parent run under `report/`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_URI = "sqlite:///runs/mlflow.db"
"""The store hetrl logs to by default (conf/tracking/mlflow.yaml's `uri`), relative to the
working directory."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hetrl.report",
        description="Make a sweep's report (Pareto front, EPS, learning curves, phases, "
                    "table) and log it to its MLflow parent run under report/.")
    parser.add_argument("sweep", help="the sweep's folder (runs/multirun/<date>/<time>) or "
                                      "its parent run id")
    parser.add_argument("--tracking-uri", default=DEFAULT_URI,
                        help=f"the MLflow store the sweep logged to (default: {DEFAULT_URI})")
    parser.add_argument("--out", type=Path, help="also write the report's files to this folder")
    args = parser.parse_args(argv)

    from hetrl.report.locate import find_parent, open_store
    from hetrl.report.make import ARTIFACT_DIR, log_report
    from hetrl.report.runs import ReportError

    try:
        client = open_store(args.tracking_uri)
        parent_id = find_parent(client, args.sweep)
        logged = log_report(client, parent_id, args.out)
    except ReportError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    run = client.get_run(parent_id)
    print(f"report of {run.info.run_name} ({parent_id}) logged to {ARTIFACT_DIR}/: "
          + ", ".join(p.rsplit("/", 1)[-1] for p in logged)
          + (f"; also in {args.out}" if args.out else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
