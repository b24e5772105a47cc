"""Sustained MLflow write load: metric rows/s and p99 `log_batch` latency for 1, 4 and 8
concurrent writers (processes, as a parallel sweep's jobs are) on three stores: one sqlite
file in WAL mode with a busy timeout (hetrl.tracking.mlflow.client_for), and a tracking
server (`python -m hetrl.tracking.server up`) on sqlite and on PostgreSQL. No anchor publishes this
figure.

    python benchmarks/tracking_load.py           # 1/4/8 writers, 100 batches of 100 rows each
    python benchmarks/tracking_load.py --smoke   # 1 writer, 5 batches of 50 rows; 1 server worker
    python benchmarks/tracking_load.py --stores sqlite,server+sqlite

Each writer creates its run, waits for the others, then logs its batches back to back
(each a `log_batch` of `rows` metrics: 5 keys x rows/5 steps). rows/s is all writers' rows
over the wall time from the common start to the last writer's end. A server runs with
`--workers` processes (default: the script's, one per core up to 4); server+PostgreSQL is
measured where PostgreSQL is installed (else the reason is printed), and the connections its
pool holds after the load are counted against the bound the script sets.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from common import host_line, parse_args, table, write_results

from hetrl.tracking import server as tracking_server

STORES = ("sqlite", "server+sqlite", "server+PostgreSQL")
SMOKE = {"counts": (1,), "batches": 5, "rows": 50, "workers": 1}
"""--smoke: one writer of 5 batches of 50 rows, a server of 1 worker, on a sqlite file and one
server (`smoke_stores`)."""


def smoke_stores() -> list[str]:
    """--smoke's stores: a sqlite file and a server, on PostgreSQL where it is installed (a
    server on sqlite runs the same code here, with the other backend)."""
    return ["sqlite", "server+sqlite" if tracking_server.postgres_missing()
            else "server+PostgreSQL"]


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


class Server:
    """`python -m hetrl.tracking.server up` in a folder of its own under /tmp (open to others: as
    root PostgreSQL runs as the user postgres); `down` removes the folder too."""

    def __init__(self, backend: str, workers: int | None) -> None:
        self.backend, self.workers = backend, workers
        self.folder = Path(tempfile.mkdtemp(prefix="hetrl-tracking-load-"))
        self.folder.chmod(0o755)
        self.state: dict = {}

    def _script(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "hetrl.tracking.server", *args, "--dir", str(self.folder)],
                              capture_output=True, text=True, timeout=600)

    def up(self) -> str:
        workers = ["--workers", str(self.workers)] if self.workers else []
        up = self._script("up", "--backend", self.backend, "--port", "0", *workers)
        if up.returncode:
            raise RuntimeError(f"tracking-server up --backend {self.backend} failed:\n"
                               f"{up.stdout}{up.stderr}")
        self.state = json.loads((self.folder / "server.json").read_text())
        return self.state["uri"]

    def down(self) -> None:
        try:
            down = self._script("down")
            if down.returncode:
                print(f"tracking-server down failed: {down.stdout}{down.stderr}", file=sys.stderr)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    @contextmanager
    def peak_connections(self) -> Iterator[dict]:
        """While in it, the most PostgreSQL connections to the store seen (sampled every
        0.1 s), with the script's bound on them: `peak`, `bound`, `how`."""
        import psycopg

        uri = tracking_server.postgres_uri(self.folder, self.state["postgres"], "postgres")
        pool, overflow = map(int, self.state["pool"].split("+"))
        workers = self.state["workers"]
        found = {"peak": 0, "bound": tracking_server.connection_bound(workers, pool, overflow),
                 "how": f"({workers} workers + 1) x {tracking_server.ENGINES} engines x "
                        f"(pool {pool} + overflow {overflow})"}
        done = threading.Event()

        def sample() -> None:
            with psycopg.connect(uri.replace("+psycopg", ""), autocommit=True) as connection:
                while not done.wait(0.1):
                    (count,) = connection.execute("SELECT count(*) FROM pg_stat_activity "
                                                  "WHERE datname = 'mlflow'").fetchone()
                    found["peak"] = max(found["peak"], count)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            yield found
        finally:
            done.set()
            sampler.join(timeout=10)


@contextmanager
def serving(store: str, workers: int | None) -> Iterator[tuple[str, Server | None]]:
    """The tracking uri of `store`, and its server (None for a plain sqlite file)."""
    if store == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{Path(folder) / 'mlflow.db'}", None
        return
    server = Server("sqlite" if store == "server+sqlite" else "postgresql", workers)
    try:
        yield server.up(), server
    finally:
        server.down()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="seconds: few, small batches")
    parser.add_argument("--stores", help=f"which of {', '.join(STORES)} (default: all; "
                                          "--smoke: see smoke_stores)")
    parser.add_argument("--workers", type=int, default=None,
                        help="the servers' worker processes (default: the script's; --smoke: 1)")
    args = parse_args(parser)
    stores = (args.stores.split(",") if args.stores else smoke_stores() if args.smoke
              else list(STORES))
    if unknown := set(stores) - set(STORES):
        parser.error(f"--stores {args.stores}: no store {', '.join(sorted(unknown))}; "
                     f"choose among {', '.join(STORES)}")
    counts, batches, rows = ((SMOKE["counts"], SMOKE["batches"], SMOKE["rows"]) if args.smoke
                             else ((1, 4, 8), 100, 100))
    workers = args.workers or (SMOKE["workers"] if args.smoke else None)
    print(host_line("mlflow"))
    results, notes = [], []
    for store in stores:
        if store == "server+PostgreSQL" and (missing := tracking_server.postgres_missing()):
            notes.append(f"server+PostgreSQL not measured: {missing}")
            continue
        with serving(store, workers) as (uri, server), ExitStack() as stack:
            if store == "server+PostgreSQL":
                connections = stack.enter_context(server.peak_connections())
            for writers in counts:
                rate, p99, errors = measure(uri, writers, batches, rows)
                results.append((store, writers, f"{rate:,.0f}", f"{p99 * 1000:.1f}", errors))
            if server is not None:
                notes.append(f"{store}: {server.state['workers']} server worker(s)")
            if store == "server+PostgreSQL":
                notes.append(f"server+PostgreSQL: at most {connections['peak']} connections to "
                             f"the store (bound {connections['bound']}: {connections['how']})")
    table(["store", "writers", "metric rows/s", "p99 log_batch ms", "failed batches"], results,
          title=f"{batches} batches of {rows} rows per writer; sqlite: WAL, busy timeout; "
                "server: python -m hetrl.tracking.server", align="lrrrr")
    for note in notes:
        print(note)
    print(host_line("mlflow").split("; ")[0])


if __name__ == "__main__":
    main()
    write_results()
