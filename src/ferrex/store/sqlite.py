"""SQLite metadata store: the source of truth for every memory, entity, journal and audit row.

One connection in WAL mode, serialized by a re-entrant lock (the server runs blocking work in
worker threads). Every statement uses bound parameters.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from ferrex.store.call_keys import CallKeyRows
from ferrex.store.schema import MIGRATIONS, SCHEMA_VERSION
from ferrex.store.sqlite_entities import EntityRows
from ferrex.store.sqlite_journal import JournalRows
from ferrex.store.sqlite_memories import MemoryRows


class SchemaTooNewError(Exception):
    """The database was written by a newer ferrex."""


class SqliteStore(MemoryRows, EntityRows, JournalRows, CallKeyRows):
    """SQLite adapter for memories, entities, the dual-write journal and the audit log.

    Each group of rows is a mixin of its own (``sqlite_memories``, ``sqlite_entities``,
    ``sqlite_journal``, ``call_keys``) over the one connection (``sqlite_rows``)."""

    def __init__(self, path: Path, *, synchronous: str = "FULL") -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(
            str(path), isolation_level=None, check_same_thread=False, timeout=30.0
        )
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(f"PRAGMA synchronous={synchronous}")
        self._synchronous = synchronous
        self._conn.execute("PRAGMA foreign_keys=ON")
        # INSERT OR REPLACE deletes the old row: its delete triggers (the counters) must fire.
        self._conn.execute("PRAGMA recursive_triggers=ON")
        self._conn.execute("PRAGMA busy_timeout=30000")
        self._in_tx = 0
        self._savepoints = 0
        self._migrate()

    # ------------------------------------------------------------------ plumbing

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _migrate(self) -> None:
        with self._lock:
            current = int(self._conn.execute("PRAGMA user_version").fetchone()[0])
            if current > SCHEMA_VERSION:
                raise SchemaTooNewError(
                    f"the database schema is version {current}, this ferrex knows up to "
                    f"{SCHEMA_VERSION}: upgrade ferrex"
                )
            for version in range(current + 1, SCHEMA_VERSION + 1):
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    for statement in _split_sql(MIGRATIONS[version]):
                        self._conn.execute(statement)
                    self._conn.execute(f"PRAGMA user_version={version}")
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise

    @property
    def schema_version(self) -> int:
        with self._lock:
            return int(self._conn.execute("PRAGMA user_version").fetchone()[0])

    def data_version(self) -> int:
        """Changes when another connection commits (used to keep caches honest)."""
        with self._lock:
            return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    # ------------------------------------------------------------------ meta

    def get_meta(self, key: str) -> str | None:
        rows = self._q("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0]["value"] if rows else None

    def set_meta(self, key: str, value: str) -> None:
        self._x(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def delete_meta(self, key: str) -> None:
        self._x("DELETE FROM meta WHERE key = ?", (key,))

    def all_meta(self) -> dict[str, str]:
        return {row["key"]: row["value"] for row in self._q("SELECT key, value FROM meta")}


def _split_sql(script: str) -> list[str]:
    """Statements of a migration script (trigger bodies hold statements of their own)."""
    statements = []
    buffer: list[str] = []
    for line in script.splitlines():
        stripped = line.strip()
        if stripped.startswith("--"):
            continue
        buffer.append(line)
        text = "\n".join(buffer)
        if stripped.endswith(";") and sqlite3.complete_statement(text):
            statement = text.strip().rstrip(";")
            if statement:
                statements.append(statement)
            buffer = []
    tail = "\n".join(buffer).strip()
    if tail:
        statements.append(tail)
    return statements
