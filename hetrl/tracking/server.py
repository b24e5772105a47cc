"""An MLflow tracking server for jobs on many machines: `mlflow server` on PostgreSQL.

    python -m hetrl.tracking.server up                      # PostgreSQL, http://127.0.0.1:5000
    python -m hetrl.tracking.server up --host 0.0.0.0       # reachable from the other machines
    python -m hetrl.tracking.server up --backend sqlite     # no PostgreSQL needed (one machine)
    python -m hetrl.tracking.server status
    python -m hetrl.tracking.server down

`up` prints the `tracking.uri=http://host:port` to give the jobs. Everything lives in one
folder (--dir, default runs/tracking-server): a private PostgreSQL cluster (postgres/, its
data, log and password; no system service: Debian's initdb, pg_ctl and postgres, found on
PATH or under /usr/lib/postgresql/*/bin) or a sqlite file (mlflow.db, in WAL mode with a busy
timeout), the artifacts, the server's log and server.json (what `down` and `status` read).
`down` stops the server and PostgreSQL and keeps the data: the next `up` goes on with it.

Artifacts are uploaded to the server (--serve-artifacts) and stored under artifacts/ on its
machine (--artifacts-destination): a job on any machine that reaches the server reaches its
artifacts, with no shared file system (a --default-artifact-root path would be written by
each job on its own machine). The server's SQLAlchemy pool is bounded: each of its --workers
processes (and the process that starts them) holds at most --pool-size + --max-overflow
connections per store engine (MLFLOW_SQLALCHEMYSTORE_POOL_SIZE / _MAX_OVERFLOW; a request
that finds none free waits up to SQLAlchemy's 30 s), and PostgreSQL is started with room for
all of them (max_connections).

initdb and postgres refuse to run as root: as root the cluster is run as --pg-user (default
`postgres`, the user Debian's package creates), which must reach the folder (the tests put it
under /tmp). Run it from hetrl's venv; PostgreSQL needs its driver: pip install -e '.[server]'.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from hetrl.tracking.postgres import (
    Failed,
    postgres_missing,
    postgres_running,
    postgres_uri,
    start_postgres,
    stop_postgres,
)
from hetrl.tracking.sqlite import store_uri, wal_mode

STATE = "server.json"
ENGINES = 3  # SQLAlchemy engines per server process: tracking, model registry and jobs stores
START_S = 300  # how long `up` waits for the server to answer (it imports MLflow per worker)


def connection_bound(workers: int, pool_size: int, max_overflow: int) -> int:
    """The most connections the server opens to PostgreSQL: each of its workers and the
    `mlflow server` process that starts them (it creates the tables, and keeps its pool) has
    one engine per store, each holding at most pool_size + max_overflow connections."""
    return (workers + 1) * ENGINES * (pool_size + max_overflow)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m hetrl.tracking.server",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start the server (and PostgreSQL); print its uri")
    up.add_argument("--backend", choices=("postgresql", "sqlite"), default="postgresql")
    up.add_argument("--host", default="127.0.0.1",
                    help="interface to listen on; 0.0.0.0 for other machines (default %(default)s)")
    up.add_argument("--port", type=int, default=5000, help="0: a free port (default %(default)s)")
    up.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1),
                    help="server processes (default: the cores, at most 4: %(default)s)")
    up.add_argument("--pool-size", type=int, default=4,
                    help="database connections each worker keeps per engine (%(default)s)")
    up.add_argument("--max-overflow", type=int, default=4,
                    help="connections a worker may open beyond the pool (%(default)s)")
    up.add_argument("--allowed-hosts", default=None,
                    help="Host headers the server accepts (MLflow's default: localhost and "
                         "private addresses; with --host 0.0.0.0 this machine's names are added)")
    up.add_argument("--pg-user", default="postgres",
                    help="the user PostgreSQL runs as when this runs as root (%(default)s)")
    up.add_argument("--pg-port", type=int, default=0,
                    help="PostgreSQL's port on 127.0.0.1 (default: a free one)")
    for command in (up, commands.add_parser("down", help="stop the server and PostgreSQL"),
                    commands.add_parser("status", help="what runs, and whether it answers")):
        command.add_argument("--dir", type=Path, default=Path("runs/tracking-server"),
                             help="where the store, artifacts and logs live (%(default)s)")
    args = parser.parse_args()
    args.dir = args.dir.resolve()
    try:
        return {"up": cmd_up, "down": cmd_down, "status": cmd_status}[args.command](args)
    except Failed as error:
        print(f"tracking-server {args.command}: {error}", file=sys.stderr)
        return 1


# --- up -------------------------------------------------------------------------------------

def cmd_up(args: argparse.Namespace) -> int:
    state = read_state(args.dir)
    if state and group_alive(state["pid"]):
        print(f"already up ({state['backend']}, pid {state['pid']})")
        print(f"tracking.uri={state['uri']}")
        return 0
    if state:  # a server that died: stop what is left of it
        stop(args.dir, state, quiet=True)
    args.dir.mkdir(parents=True, exist_ok=True)
    port = args.port or free_port(args.host)
    check_port_free(args.host, port)
    state = {"backend": args.backend, "host": args.host, "port": port,
             "uri": f"http://{public_name(args.host)}:{port}", "workers": args.workers,
             "artifacts": str(args.dir / "artifacts")}
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true",
           # the GenAI job runner (a huey consumer per server): hetrl submits no MLflow jobs
           "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    # MLflow's stores assert their sessions' read-only flags under pytest only: a server
    # started by a test or a benchmark runs as it does anywhere else
    env.pop("PYTEST_CURRENT_TEST", None)
    try:
        if args.backend == "postgresql":
            start_postgres(args.dir, args.pg_user, args.pg_port or free_port("127.0.0.1"),
                           connection_bound(args.workers, args.pool_size, args.max_overflow)
                           + 10, state)
            env["MLFLOW_BACKEND_STORE_URI"] = postgres_uri(args.dir, state["postgres"])
            env["MLFLOW_SQLALCHEMYSTORE_POOL_SIZE"] = str(args.pool_size)
            env["MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW"] = str(args.max_overflow)
            state["pool"] = f"{args.pool_size}+{args.max_overflow}"
        else:
            env["MLFLOW_BACKEND_STORE_URI"] = sqlite_uri(args.dir / "mlflow.db")
        command = [sys.executable, "-m", "mlflow", "server", "--host", args.host,
                   "--port", str(port), "--workers", str(args.workers), "--serve-artifacts",
                   "--artifacts-destination", state["artifacts"]]
        allowed = args.allowed_hosts or wildcard_allowed_hosts(args.host)
        if allowed:
            command += ["--allowed-hosts", allowed]
        log = args.dir / "mlflow.log"
        with log.open("ab") as out:  # the backend uri (a password) goes by environment
            server = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out,
                                      stderr=subprocess.STDOUT, env=env, cwd=args.dir,
                                      start_new_session=True)  # its own group: down stops all
        state["pid"] = server.pid
        write_state(args.dir, state)
        wait_until_answers(server, f"http://{local_name(args.host)}:{port}", log)
    except BaseException:  # a failed or interrupted `up` leaves nothing running
        stop(args.dir, state, quiet=True)
        raise
    print(f"up: mlflow server (pid {server.pid}, {args.workers} workers) on {describe(state)}; "
          f"artifacts {state['artifacts']}; log {log}")
    print(f"tracking.uri={state['uri']}")
    return 0


def sqlite_uri(db: Path) -> str:
    """The server's sqlite store: WAL mode and a busy timeout, as hetrl's jobs use it."""
    wal_mode(db)
    return store_uri(f"sqlite:///{db}")


def wait_until_answers(server: subprocess.Popen, url: str, log: Path) -> None:
    """Until the server answers an API call (its store opened, its tables made), or fail with
    the end of its log if it exits or takes longer than START_S."""
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise Failed(f"mlflow server exited with {server.returncode}; the end of {log}:\n"
                         + tail(log))
        if answers(url):
            return
        time.sleep(0.5)
    raise Failed(f"mlflow server did not answer at {url} within {START_S} s; the end of "
                 f"{log}:\n" + tail(log))


def answers(url: str, timeout: float = 5.0) -> bool:
    """Whether an MLflow server at `url` (on this machine: no proxy) answers an API call (its
    store works)."""
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with direct.open(f"{url}/api/2.0/mlflow/experiments/get-by-name"
                         "?experiment_name=Default", timeout=timeout) as response:
            return response.status == 200
    except urllib.error.HTTPError as error:
        return error.code == 404  # no such experiment: the store answered
    except OSError:
        return False


def public_name(host: str) -> str:
    """The host name jobs use: this machine's name when it listens on every interface (its
    full name, unless that is only `localhost`)."""
    if host not in ("0.0.0.0", "::", ""):
        return host
    fqdn = socket.getfqdn()
    return socket.gethostname() if fqdn.startswith("localhost") else fqdn


def local_name(host: str) -> str:
    """Where this machine reaches the server."""
    return {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "[::1]"}.get(host, host)


def wildcard_allowed_hosts(host: str) -> str | None:
    """Listening on every interface: MLflow's default Host headers (localhost, private
    addresses) and this machine's names, by which the other machines reach it."""
    if host not in ("0.0.0.0", "::", ""):
        return None
    from mlflow.server.security_utils import get_default_allowed_hosts

    names = {socket.gethostname(), socket.getfqdn()} - {"localhost"}
    return ",".join([*get_default_allowed_hosts(), *sorted(names),
                     *(f"{name}:*" for name in sorted(names))])


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.bind((local_name(host).strip("[]") if host else "", 0))
        return probe.getsockname()[1]


def check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise Failed(f"port {port} on {host} is taken ({error.strerror}): another mlflow "
                         "server or ui? Choose another with --port N, or --port 0 for a free "
                         "one") from None


# --- down, status ---------------------------------------------------------------------------

def cmd_down(args: argparse.Namespace) -> int:
    state = read_state(args.dir)
    if state is None:
        print(f"not up: no {args.dir / STATE}")
        return 0
    stop(args.dir, state)
    return 0


def stop(folder: Path, state: dict, quiet: bool = False) -> None:
    """Stop the server's process group (SIGTERM, SIGKILL after 20 s) and PostgreSQL."""
    pid = state.get("pid")
    if pid and group_alive(pid):
        signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while group_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if group_alive(pid):
            signal_group(pid, signal.SIGKILL)
        if not quiet:
            print(f"down: mlflow server (pid {pid}) stopped")
    if state.get("postgres"):
        stop_postgres(state["postgres"])
        if not quiet:
            print(f"down: PostgreSQL ({state['postgres']['data']}) stopped; data kept")
    (folder / STATE).unlink(missing_ok=True)


def signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:  # ended meanwhile
        pass


def cmd_status(args: argparse.Namespace) -> int:
    state = read_state(args.dir)
    if state is None:
        print(f"not up: no {args.dir / STATE} (start it: python -m hetrl.tracking.server up)")
        return 3
    alive = group_alive(state["pid"])
    answering = alive and answers(f"http://{local_name(state['host'])}:{state['port']}")
    print(f"tracking.uri={state['uri']}  "
          + ("answers" if answering else "running, not answering" if alive else "NOT RUNNING"))
    print(f"server: pid {state['pid']}, {state['workers']} workers, {describe(state)}")
    if state.get("postgres"):
        print(f"postgres: {'running' if postgres_running(state['postgres']) else 'stopped'}, "
              f"data {state['postgres']['data']}")
    print(f"artifacts: {state['artifacts']}; log: {args.dir / 'mlflow.log'}")
    return 0 if answering else 1


def describe(state: dict) -> str:
    if state["backend"] == "sqlite":
        return f"sqlite {Path(state['artifacts']).parent / 'mlflow.db'}"
    postgres = state["postgres"]
    return (f"PostgreSQL 127.0.0.1:{postgres['port']} (pool {state['pool']} per engine and "
            f"worker, max_connections {postgres['max_connections']})")


def read_state(folder: Path) -> dict | None:
    try:
        return json.loads((folder / STATE).read_text())
    except FileNotFoundError:
        return None


def write_state(folder: Path, state: dict) -> None:
    (folder / STATE).write_text(json.dumps(state, indent=1) + "\n")


def group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` lives (zombies, dead but not reaped, do not)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
            return True
        except ProcessLookupError:
            return False
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


if __name__ == "__main__":
    sys.exit(main())
