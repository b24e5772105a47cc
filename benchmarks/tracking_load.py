"""Sustained MLflow write load: metric rows/s and p99 `log_batch` latency for 1, 4 and 8
concurrent writers (processes, as a parallel sweep's jobs are) on one sqlite store in WAL
mode with a busy timeout (hetrl.tracking.mlflow.client_for). No anchor publishes this figure.

    python benchmarks/tracking_load.py           # 1/4/8 writers, 100 batches of 100 rows each
    python benchmarks/tracking_load.py --smoke   # seconds: 1/2 writers, 5 batches of 50 rows

Each writer creates its run, waits for the others, then logs its batches back to back
(each a `log_batch` of `rows` metrics: 5 keys x rows/5 steps). rows/s is all writers' rows
over the wall time from the common start to the last writer's end. The server+sqlite and
server+PostgreSQL columns of issue 14 are not measured here yet.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import tempfile
import time
from pathlib import Path

from common import host_line, table


def _writer(uri: str, name: str, batches: int, rows: int, ready, start, out) -> None:
    from mlflow.entities import Metric

    from hetrl.tracking.mlflow import client_for

    client, experiment_id = client_for(uri, "load")
    run_id = client.create_run(experiment_id, run_name=name).info.run_id
    ready.put(name)
    start.wait()
    latencies, errors, step = [], 0, 0
    for _ in range(batches):
        now = int(time.time() * 1000)
        metrics = [Metric(f"m{k}", float(s), now, s) for s in range(step, step + rows // 5)
                   for k in range(5)]
        step += rows // 5
        t0 = time.perf_counter()
        try:
            client.log_batch(run_id, metrics=metrics)
        except Exception:  # noqa: BLE001 - counted: "database is locked" is what this measures
            errors += 1
        latencies.append(time.perf_counter() - t0)
    client.set_terminated(run_id, "FINISHED")
    out.put((latencies, errors, time.time()))


def measure(uri: str, writers: int, batches: int, rows: int) -> tuple[float, float, int]:
    """rows/s, p99 latency (s) and failed batches of `writers` concurrent writers."""
    ctx = mp.get_context("spawn")
    ready, out, start = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_writer, args=(uri, f"w{writers}-{n}", batches, rows, ready,
                                                start, out)) for n in range(writers)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=300)
    began = time.time()
    start.set()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    latencies = sorted(t for lat, _, _ in results for t in lat)
    errors = sum(e for _, e, _ in results)
    wall = max(end for _, _, end in results) - began
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    return writers * batches * rows / wall, p99, errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="seconds: few, small batches")
    args = parser.parse_args()
    counts, batches, rows = ((1, 2), 5, 50) if args.smoke else ((1, 4, 8), 100, 100)
    print(host_line("mlflow"))
    results = []
    with tempfile.TemporaryDirectory() as folder:
        uri = f"sqlite:///{Path(folder) / 'mlflow.db'}"
        for writers in counts:
            rate, p99, errors = measure(uri, writers, batches, rows)
            results.append((writers, f"{rate:,.0f}", f"{p99 * 1000:.1f}", errors))
    table(["writers", "metric rows/s", "p99 log_batch ms", "failed batches"], results,
          title=f"sqlite (WAL, busy timeout), {batches} batches of {rows} rows per writer",
          align="rrrr")
    print(host_line("mlflow").split("; ")[0])


if __name__ == "__main__":
    main()
