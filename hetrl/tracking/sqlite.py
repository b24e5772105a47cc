"""How hetrl opens a sqlite MLflow store for many writers (a parallel sweep's jobs, a tracking
server's workers): WAL mode and a busy timeout. Plain sqlite3, no MLflow: the tracking
server's `up` sets its store up without importing MLflow (its server processes do)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

SQLITE_BUSY_S = 60  # how long a sqlite connection waits for another writer's lock


def store_uri(uri: str) -> str:
    """The URI MLflow connects with: a sqlite one gets pysqlite's busy timeout (its default
    is 5 s, short for eight jobs logging at once)."""
    if not uri.startswith("sqlite:///") or "timeout=" in uri:
        return uri
    return f"{uri}{'&' if '?' in uri else '?'}timeout={SQLITE_BUSY_S}"


def wal_mode(db: Path) -> None:
    """Put the database in WAL mode (kept in the file: once is enough): readers no longer
    block the writer, and writers wait on one another instead of failing."""
    with sqlite3.connect(db, timeout=SQLITE_BUSY_S) as connection:
        if connection.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            connection.execute("PRAGMA journal_mode=WAL")
    connection.close()
