"""The tracking server's private PostgreSQL cluster (hetrl.tracking.server): found, created,
started with room for the server's pools, and stopped; run as --pg-user when this runs as root
(initdb and postgres refuse root)."""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
from pathlib import Path


class Failed(Exception):
    """What went wrong, in one message that names the value and what to do."""


def postgres_bin() -> Path:
    """The folder of initdb, pg_ctl and postgres: on PATH, else Debian's newest version under
    /usr/lib/postgresql/<version>/bin."""
    found = shutil.which("initdb")
    folders = [Path(found).resolve().parent] if found else []
    folders += sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                      key=lambda p: [int(x) for x in p.parent.name.split(".") if x.isdigit()],
                      reverse=True)
    for folder in folders:
        if all((folder / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return folder
    raise Failed("no PostgreSQL: initdb, pg_ctl and postgres are neither on PATH nor under "
                 "/usr/lib/postgresql/*/bin; install it (Debian: apt-get install postgresql) "
                 "or use --backend sqlite")


def postgres_missing(pg_user: str = "postgres") -> str | None:
    """Why `up --backend postgresql` cannot run here, or None (the tests and the load
    benchmark ask, to skip it with that reason)."""
    try:
        postgres_bin()
        pg_account(pg_user)
        import psycopg  # noqa: F401
    except Failed as error:
        return str(error)
    except ImportError:
        return "the PostgreSQL driver is missing: pip install -e '.[server]' (psycopg)"
    return None


def pg_account(name: str) -> pwd.struct_passwd | None:
    """Who runs PostgreSQL: this user, or `name` when this runs as root (initdb refuses)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise Failed(f"initdb and postgres refuse to run as root, and there is no user {name!r} "
                     "to run them as: create one (useradd --system --create-home postgres) or "
                     "name another with --pg-user") from None


def as_pg(account: pwd.struct_passwd | None, command: list[str], cwd: Path,
          check: bool = True) -> subprocess.CompletedProcess:
    """Run a PostgreSQL tool as `account` (None: this user)."""
    kwargs = {}
    if account is not None:
        kwargs = dict(user=account.pw_uid, group=account.pw_gid, extra_groups=[])
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "LC_ALL": "C.UTF-8"}, **kwargs)
    if check and done.returncode:
        raise Failed(f"{' '.join(command)} failed ({done.returncode}):\n"
                     f"{(done.stdout + done.stderr).strip()[-2000:]}")
    return done


def start_postgres(folder: Path, pg_user: str, port: int, connections: int, state: dict) -> None:
    """Create the cluster under `folder` on first use (a superuser `mlflow` with a random
    password, password authentication on 127.0.0.1 only, no unix socket), start it on `port`
    with room for `connections` (`state["postgres"]` says where, as soon as it runs), and
    create the database `mlflow`."""
    binaries = postgres_bin()
    account = pg_account(pg_user)
    home = folder / "postgres"
    home.mkdir(mode=0o700, exist_ok=True)
    if account is not None:
        os.chown(home, account.pw_uid, account.pw_gid)
        reach = as_pg(account, ["sh", "-c", 'test -w "$0" && test -x "$0"', str(home)], Path("/"),
                      check=False)
        if reach.returncode:
            raise Failed(f"user {account.pw_name} (PostgreSQL runs as it: this runs as root) "
                         f"cannot reach {home}: a folder above it is closed to others; open "
                         "them (chmod o+x) or choose --dir under a folder it reaches (e.g. /tmp)")
    data, password = home / "data", home / "password"
    if not (data / "PG_VERSION").is_file():
        password.write_text(secrets.token_urlsafe(24))
        password.chmod(0o600)
        if account is not None:
            os.chown(password, account.pw_uid, account.pw_gid)
        as_pg(account, [str(binaries / "initdb"), "-D", str(data), "-U", "mlflow",
                        "--auth=scram-sha-256", f"--pwfile={password}", "-E", "UTF8",
                        "--no-instructions"], cwd=home)
    options = (f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' "
               f"-c max_connections={connections}")
    as_pg(account, [str(binaries / "pg_ctl"), "-D", str(data), "-l", str(home / "postgres.log"),
                    "-o", options, "-w", "-t", "120", "start"], cwd=home)
    state["postgres"] = {"bin": str(binaries), "data": str(data), "port": port,
                         "user": account.pw_name if account else None,
                         "max_connections": connections}
    create_database(folder, state["postgres"])


def postgres_uri(folder: Path, postgres: dict, database: str = "mlflow") -> str:
    password = (folder / "postgres" / "password").read_text().strip()
    return f"postgresql+psycopg://mlflow:{password}@127.0.0.1:{postgres['port']}/{database}"


def create_database(folder: Path, postgres: dict) -> None:
    try:
        import psycopg
    except ImportError:
        raise Failed("the PostgreSQL driver is missing: pip install -e '.[server]' "
                     "(psycopg), or use --backend sqlite") from None
    uri = postgres_uri(folder, postgres, "postgres").replace("+psycopg", "")
    with psycopg.connect(uri, autocommit=True) as connection:
        if not connection.execute("SELECT 1 FROM pg_database WHERE datname = 'mlflow'").fetchone():
            connection.execute("CREATE DATABASE mlflow")


def postgres_running(postgres: dict) -> bool:
    return (Path(postgres["data"]) / "postmaster.pid").is_file()


def stop_postgres(postgres: dict) -> None:
    if not postgres_running(postgres):
        return
    account = pwd.getpwnam(postgres["user"]) if postgres.get("user") else None
    as_pg(account, [str(Path(postgres["bin"]) / "pg_ctl"), "-D", postgres["data"], "-m", "fast",
                    "-w", "-t", "60", "stop"], cwd=Path(postgres["data"]).parent, check=False)
