"""What the SQLite store's row modules share: the connection they run on (``SqliteRows``), the
memory columns, and the conversions between rows and ``Memory`` / ``EntityRow``."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from ferrex.core.clock import from_iso, to_iso
from ferrex.core.memory import TEXT_FIELDS, Memory, MemoryType
from ferrex.core.ports import (
    EntityRow,
)

MEMORY_COLUMNS = (
    "id, namespace, type, content, subject, predicate, predicate_canonical, object, "
    "subject_entity_id, name, conditions, steps, version, confidence, source, context, "
    "created_at, updated_at, event_time, t_valid, t_invalid, superseded_by, last_accessed, "
    "last_validated, access_count, pinned, multi_valued, chunk_count, embed_model"
)
SQL_CHUNK = 500
# A memory's text columns: what the storage budget counts and what a redaction rewrites.
TEXT_COLUMNS = TEXT_FIELDS
TEXT_BYTES = " + ".join(f"coalesce(length(CAST({column} AS BLOB)), 0)" for column in TEXT_COLUMNS)


def iso_or_none(value: datetime | None) -> str | None:
    return None if value is None else to_iso(value)


def datetime_or_none(value: str | None) -> datetime | None:
    return None if value is None else from_iso(value)


def in_chunks(items: Sequence[Any], size: int = SQL_CHUNK) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class SqliteRows:
    """The store's one connection and lock (set by ``SqliteStore``), for its row mixins."""

    path: Path
    _lock: threading.RLock
    _conn: sqlite3.Connection
    _synchronous: str
    _in_tx: int
    _savepoints: int

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One atomic unit of work (re-entrant: nested calls join the outer transaction)."""
        with self._lock:
            if self._in_tx:
                self._in_tx += 1
                try:
                    yield
                finally:
                    self._in_tx -= 1
                return
            self._conn.execute("BEGIN IMMEDIATE")
            self._in_tx = 1
            try:
                yield
            except BaseException:
                self._in_tx = 0
                self._conn.execute("ROLLBACK")
                raise
            self._in_tx = 0
            self._conn.execute("COMMIT")

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """A nested unit inside a transaction: on error only its own writes are undone."""
        with self._lock:
            self._savepoints += 1
            name = f"sp{self._savepoints}"
            self._conn.execute(f"SAVEPOINT {name}")
            try:
                yield
            except BaseException:
                self._conn.execute(f"ROLLBACK TO {name}")
                self._conn.execute(f"RELEASE {name}")
                raise
            finally:
                self._savepoints -= 1
            self._conn.execute(f"RELEASE {name}")

    def _q(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def _x(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        with self._lock:
            return self._conn.execute(sql, params)


BROWSE_ORDER = {
    "date": "event_time DESC, created_at DESC, id",
    "stored": "created_at DESC, id",
    "type": "type, event_time DESC, id",
    "first": "created_at, id",
}

UPDATABLE = {
    "t_invalid",
    "superseded_by",
    "last_validated",
    "last_accessed",
    "access_count",
    "confidence",
    "pinned",
    "updated_at",
    "multi_valued",
    "chunk_count",
    "embed_model",
    "content",
}


def memory_params(memory: Memory) -> tuple[Any, ...]:
    return (
        memory.id,
        memory.namespace,
        memory.type.value,
        memory.content,
        memory.subject,
        memory.predicate,
        memory.predicate_canonical,
        memory.object,
        memory.subject_entity_id,
        memory.name,
        json.dumps(memory.conditions) if memory.conditions else None,
        json.dumps(memory.steps) if memory.steps else None,
        memory.version,
        float(memory.confidence),
        memory.source,
        json.dumps(memory.context, sort_keys=True) if memory.context is not None else None,
        to_iso(memory.created_at),
        to_iso(memory.updated_at),
        to_iso(memory.event_time),
        iso_or_none(memory.t_valid),
        iso_or_none(memory.t_invalid),
        memory.superseded_by,
        iso_or_none(memory.last_accessed),
        iso_or_none(memory.last_validated),
        int(memory.access_count),
        int(memory.pinned),
        int(memory.multi_valued),
        int(memory.chunk_count),
        memory.embed_model,
    )


def row_to_memory(row: sqlite3.Row) -> Memory:
    return Memory(
        id=row["id"],
        namespace=row["namespace"],
        type=MemoryType(row["type"]),
        content=row["content"],
        subject=row["subject"],
        predicate=row["predicate"],
        predicate_canonical=row["predicate_canonical"],
        object=row["object"],
        subject_entity_id=row["subject_entity_id"],
        name=row["name"],
        conditions=json.loads(row["conditions"]) if row["conditions"] else [],
        steps=json.loads(row["steps"]) if row["steps"] else [],
        version=row["version"],
        confidence=float(row["confidence"]),
        source=row["source"],
        context=json.loads(row["context"]) if row["context"] else None,
        created_at=from_iso(row["created_at"]),
        updated_at=from_iso(row["updated_at"]),
        event_time=from_iso(row["event_time"]),
        t_valid=datetime_or_none(row["t_valid"]),
        t_invalid=datetime_or_none(row["t_invalid"]),
        superseded_by=row["superseded_by"],
        last_accessed=datetime_or_none(row["last_accessed"]),
        last_validated=datetime_or_none(row["last_validated"]),
        access_count=int(row["access_count"]),
        pinned=bool(row["pinned"]),
        multi_valued=bool(row["multi_valued"]),
        chunk_count=int(row["chunk_count"]),
        embed_model=row["embed_model"],
    )


def row_to_entity(row: sqlite3.Row) -> EntityRow:
    return EntityRow(
        id=int(row["id"]),
        namespace=row["namespace"],
        name=row["name"],
        display_name=row["display_name"],
        entity_type=row["entity_type"],
        created_at=from_iso(row["created_at"]),
        updated_at=from_iso(row["updated_at"]),
    )
