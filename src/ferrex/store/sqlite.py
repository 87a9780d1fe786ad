"""SQLite metadata store: the source of truth for every memory, entity, journal and audit row.

One connection in WAL mode, serialized by a re-entrant lock (the server runs blocking work in
worker threads). Every statement uses bound parameters.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from ferrex.core.clock import from_iso, to_iso
from ferrex.core.memory import Memory, MemoryType
from ferrex.core.neighbours import ASK_TAIL, asks_question
from ferrex.core.ports import (
    EntityRow,
    JournalEntry,
    MemoryCount,
    ReviewBucket,
    StoredNeighbour,
)
from ferrex.store.call_keys import CallKeyRows
from ferrex.store.schema import MIGRATIONS, SCHEMA_VERSION

_MEMORY_COLUMNS = (
    "id, namespace, type, content, subject, predicate, predicate_canonical, object, "
    "subject_entity_id, name, conditions, steps, version, confidence, source, context, "
    "created_at, updated_at, event_time, t_valid, t_invalid, superseded_by, last_accessed, "
    "last_validated, access_count, pinned, multi_valued, chunk_count, embed_model"
)
_SQL_CHUNK = 500
# A memory's text columns: what the storage budget counts and what a redaction rewrites.
_TEXT_COLUMNS = (
    "content",
    "subject",
    "predicate",
    "object",
    "name",
    "conditions",
    "steps",
    "source",
    "context",
)
_TEXT_BYTES = " + ".join(f"coalesce(length(CAST({column} AS BLOB)), 0)" for column in _TEXT_COLUMNS)


class SchemaTooNewError(Exception):
    """The database was written by a newer ferrex."""


def _ts(value: datetime | None) -> str | None:
    return None if value is None else to_iso(value)


def _dt(value: str | None) -> datetime | None:
    return None if value is None else from_iso(value)


def _chunks(items: Sequence[Any], size: int = _SQL_CHUNK) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class SqliteStore(CallKeyRows):
    """SQLite adapter for memories, entities, the dual-write journal and the audit log."""

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

    # ------------------------------------------------------------------ memories

    def insert_memory(self, memory: Memory) -> None:
        self._x(
            f"INSERT INTO memories ({_MEMORY_COLUMNS}) VALUES ({', '.join('?' * 29)})",
            _memory_params(memory),
        )

    def replace_memory(self, memory: Memory) -> None:
        self._x(
            f"INSERT OR REPLACE INTO memories ({_MEMORY_COLUMNS}) VALUES ({', '.join('?' * 29)})",
            _memory_params(memory),
        )

    def memory_exists(self, memory_id: str) -> bool:
        return bool(self._q("SELECT 1 FROM memories WHERE id = ?", (memory_id,)))

    def get_memory(self, memory_id: str) -> Memory | None:
        found = self.get_memories([memory_id])
        return found.get(memory_id)

    def get_memories(self, memory_ids: Sequence[str]) -> dict[str, Memory]:
        """Rows by id, with their entity names and ids attached."""
        out: dict[str, Memory] = {}
        ids = list(dict.fromkeys(memory_ids))
        for chunk in _chunks(ids):
            marks = ",".join("?" * len(chunk))
            for row in self._q(
                f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE id IN ({marks})", chunk
            ):
                out[row["id"]] = _row_to_memory(row)
        self._attach_entities(out)
        return out

    def _attach_entities(self, memories: dict[str, Memory]) -> None:
        ids = list(memories)
        for chunk in _chunks(ids):
            marks = ",".join("?" * len(chunk))
            rows = self._q(
                "SELECT me.memory_id, e.id, e.display_name FROM memory_entities me "
                f"JOIN entities e ON e.id = me.entity_id WHERE me.memory_id IN ({marks}) "
                "ORDER BY me.memory_id, e.id",
                chunk,
            )
            for row in rows:
                memory = memories[row["memory_id"]]
                memory.entity_ids.append(int(row["id"]))
                memory.entities.append(row["display_name"])

    def update_memory_fields(self, memory_id: str, **fields: Any) -> None:
        if not fields:
            return
        assignments = []
        params: list[Any] = []
        for key, value in fields.items():
            if key not in _UPDATABLE:
                raise ValueError(f"field {key} cannot be updated")
            assignments.append(f"{key} = ?")
            if isinstance(value, datetime):
                value = to_iso(value)
            elif isinstance(value, bool):
                value = int(value)
            params.append(value)
        params.append(memory_id)
        self._x(f"UPDATE memories SET {', '.join(assignments)} WHERE id = ?", params)

    def rewrite_text(self, memory: Memory) -> None:
        """Write a memory's text fields back (a redaction); nothing else of the row changes."""
        columns = _MEMORY_COLUMNS.replace(" ", "").split(",")
        params = dict(zip(columns, _memory_params(memory), strict=True))
        self._x(
            "UPDATE memories SET "
            + ", ".join(f"{name} = ?" for name in _TEXT_COLUMNS)
            + " WHERE id = ?",
            [*(params[name] for name in _TEXT_COLUMNS), memory.id],
        )

    def audit_details(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """(seq, detail) of every audit row that has a detail."""
        for row in self._q("SELECT seq, detail FROM audit WHERE detail IS NOT NULL"):
            yield int(row["seq"]), json.loads(row["detail"])

    def set_audit_detail(self, seq: int, detail: dict[str, Any]) -> None:
        text = json.dumps(detail, sort_keys=True)
        self._x("UPDATE audit SET detail = ? WHERE seq = ?", (text, seq))

    def scrub(self) -> None:
        """Leave no deleted or overwritten text in the file's free pages or the WAL: rewrite the
        database with secure_delete on, then checkpoint and truncate the WAL."""
        with self._lock:
            self._conn.execute("PRAGMA secure_delete=ON")
            try:
                self._conn.execute("VACUUM")
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                self._conn.execute("PRAGMA secure_delete=OFF")

    def delete_memories(self, memory_ids: Sequence[str]) -> None:
        for chunk in _chunks(list(memory_ids)):
            marks = ",".join("?" * len(chunk))
            self._x(f"DELETE FROM memories WHERE id IN ({marks})", chunk)
            # A replaced memory never names a successor that is gone (forget, eviction).
            self._x(
                f"UPDATE memories SET superseded_by = NULL WHERE superseded_by IN ({marks})", chunk
            )

    def existing_ids(self, memory_ids: Sequence[str], namespace: str | None = None) -> set[str]:
        found: set[str] = set()
        for chunk in _chunks(list(memory_ids)):
            marks = ",".join("?" * len(chunk))
            sql = f"SELECT id FROM memories WHERE id IN ({marks})"
            params: list[Any] = list(chunk)
            if namespace is not None:
                sql += " AND namespace = ?"
                params.append(namespace)
            found.update(row["id"] for row in self._q(sql, params))
        return found

    def current_facts(self, namespace: str, subject_entity_id: int) -> list[Memory]:
        rows = self._q(
            f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE namespace = ? AND type = 'semantic' "
            "AND subject_entity_id = ? AND t_invalid IS NULL ORDER BY created_at, id",
            (namespace, subject_entity_id),
        )
        return self._with_entities(rows)

    def facts_for_predicate(
        self, namespace: str, subject_entity_id: int, predicate_canonical: str
    ) -> list[Memory]:
        rows = self._q(
            f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE namespace = ? AND type = 'semantic' "
            "AND subject_entity_id = ? AND predicate_canonical = ? ORDER BY created_at, id",
            (namespace, subject_entity_id, predicate_canonical),
        )
        return self._with_entities(rows)

    def predicates_of_subject(self, namespace: str, subject_entity_id: int) -> list[str]:
        rows = self._q(
            "SELECT DISTINCT predicate_canonical FROM memories WHERE namespace = ? AND "
            "type = 'semantic' AND subject_entity_id = ? AND predicate_canonical IS NOT NULL "
            "ORDER BY predicate_canonical",
            (namespace, subject_entity_id),
        )
        return [row["predicate_canonical"] for row in rows]

    def procedure_versions(self, namespace: str, name: str) -> list[Memory]:
        rows = self._q(
            f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE namespace = ? AND type = 'procedural' "
            "AND name = ? ORDER BY version",
            (namespace, name),
        )
        return self._with_entities(rows)

    def _with_entities(self, rows: Iterable[sqlite3.Row]) -> list[Memory]:
        memories = {row["id"]: _row_to_memory(row) for row in rows}
        self._attach_entities(memories)
        return list(memories.values())

    def memories_in_namespace(
        self,
        namespace: str | None,
        *,
        where: str = "1=1",
        params: Sequence[Any] = (),
        order: str = "created_at DESC, id",
        limit: int | None = None,
        with_entities: bool = True,
    ) -> list[Memory]:
        """Memories matching a fixed SQL predicate (``where`` is trusted code, never input).

        ``with_entities=False`` skips loading entity links (whole-namespace scans: stats).
        """
        sql = f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE {where}"
        args: list[Any] = list(params)
        if namespace is not None:
            sql += " AND namespace = ?"
            args.append(namespace)
        sql += f" ORDER BY {order}"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        rows = self._q(sql, args)
        if not with_entities:
            return [_row_to_memory(row) for row in rows]
        return self._with_entities(rows)

    def current_memories(self, namespace: str) -> list[Memory]:
        """The namespace's current memories (no ``t_invalid``), oldest first (reflect)."""
        return self.memories_in_namespace(
            namespace, where="t_invalid IS NULL", order="created_at, id"
        )

    def named_procedures(self, namespace: str) -> list[Memory]:
        """Every version of every named procedure, by version (core compares the names)."""
        return self.memories_in_namespace(
            namespace, where="type = 'procedural' AND name IS NOT NULL", order="version, id"
        )

    def ended_unpinned(self, namespace: str) -> list[Memory]:
        """Unpinned facts and events that have ended (``t_invalid`` set), by end (retention)."""
        return self.memories_in_namespace(
            namespace,
            where="type IN ('semantic', 'episodic') AND t_invalid IS NOT NULL AND pinned = 0",
            order="t_invalid, id",
        )

    def evictable(self) -> list[Memory]:
        """What the storage budget may evict, in every namespace: unpinned events and ended
        facts (current facts and procedures never), oldest first."""
        return self.memories_in_namespace(
            None,
            where="(type = 'episodic' OR (type = 'semantic' AND t_invalid IS NOT NULL)) "
            "AND pinned = 0",
            order="created_at, id",
        )

    def facts_superseded_by(self, namespace: str, memory_ids: Sequence[str]) -> list[Memory]:
        """The facts that ``memory_ids`` superseded (without their entity links)."""
        out: list[Memory] = []
        for chunk in _chunks(list(memory_ids)):
            out += self.memories_in_namespace(
                namespace,
                where=f"type = 'semantic' AND superseded_by IN ({','.join('?' * len(chunk))})",
                params=chunk,
                with_entities=False,
            )
        return out

    def browse_memories(
        self, namespace: str, *, types: Sequence[str], validity: str, sort: str
    ) -> list[Memory]:
        where, params = "1=1", list(types)
        if types:
            where += f" AND type IN ({','.join('?' * len(types))})"
        if validity == "current":
            where += " AND t_invalid IS NULL"
        elif validity == "ended":
            where += " AND t_invalid IS NOT NULL"
        return self.memories_in_namespace(
            namespace, where=where, params=params, order=_BROWSE_ORDER[sort], with_entities=False
        )

    def iter_memories(self, namespace: str | None = None, batch: int = 500) -> Iterator[Memory]:
        """Every memory in insertion order (rowid), in batches (export, rebuild, doctor).

        Insertion order matters: the vector engine orders exact score ties by storage position,
        so a rebuild or an import that re-inserts in the same order ranks ties the same way.
        """
        last = 0
        while True:
            sql = f"SELECT rowid AS _rowid, {_MEMORY_COLUMNS} FROM memories WHERE rowid > ?"
            args: list[Any] = [last]
            if namespace is not None:
                sql += " AND namespace = ?"
                args.append(namespace)
            sql += " ORDER BY rowid LIMIT ?"
            args.append(batch)
            rows = self._q(sql, args)
            if not rows:
                return
            yield from self._with_entities(rows)
            last = int(rows[-1]["_rowid"])

    def all_memory_ids(self) -> dict[str, int]:
        """id -> expected number of vector points."""
        return {
            row["id"]: int(row["chunk_count"])
            for row in self._q("SELECT id, chunk_count FROM memories")
        }

    def count_memories(self, namespace: str | None = None) -> int:
        """From the counters the triggers keep (``memory_counts``): a recall asks on every call,
        and counting the rows scanned the namespace (4.8 ms at 100k memories)."""
        if namespace is None:
            rows = self._q("SELECT COALESCE(SUM(n), 0) AS n FROM memory_counts")
        else:
            rows = self._q(
                "SELECT COALESCE(SUM(n), 0) AS n FROM memory_counts WHERE namespace = ?",
                (namespace,),
            )
        return int(rows[0]["n"])

    def count_by_type(self, namespace: str) -> dict[str, int]:
        rows = self._q(
            "SELECT type, COUNT(*) AS n FROM memories WHERE namespace = ? GROUP BY type",
            (namespace,),
        )
        counts = {t.value: 0 for t in MemoryType}
        counts.update({row["type"]: int(row["n"]) for row in rows})
        return counts

    def memory_counts(self, namespace: str | None) -> list[MemoryCount]:
        """The write-kept counters: memories per type / current / pinned (no scan)."""
        sql = "SELECT type, current, pinned, SUM(n) AS n FROM memory_counts"
        args: list[Any] = []
        if namespace is not None:
            sql += " WHERE namespace = ?"
            args.append(namespace)
        rows = self._q(sql + " GROUP BY type, current, pinned", args)
        return [
            MemoryCount(
                type=row["type"],
                current=bool(row["current"]),
                pinned=bool(row["pinned"]),
                n=int(row["n"]),
            )
            for row in rows
            if int(row["n"]) > 0
        ]

    def review_buckets(self, namespace: str) -> list[ReviewBucket]:
        """Current memories counted per type, confidence, hour of creation and hour of last
        validation (kept on write): what staleness and review depend on."""
        rows = self._q(
            "SELECT type, confidence, created_hour, validated_hour, n FROM review_buckets "
            "WHERE namespace = ? AND n > 0",
            (namespace,),
        )
        return [
            ReviewBucket(
                type=row["type"],
                confidence=float(row["confidence"]),
                created_hour=row["created_hour"],
                validated_hour=row["validated_hour"] or None,
                n=int(row["n"]),
            )
            for row in rows
        ]

    def memories_in_bucket(self, namespace: str, bucket: ReviewBucket) -> list[Memory]:
        """The current memories one review bucket counts (through the namespace / type /
        creation index: an hour of writes at most)."""
        start = f"{bucket.created_hour}:00:00"
        end = f"{bucket.created_hour}:59:59.999999Z"
        validated = bucket.validated_hour or ""
        return self.memories_in_namespace(
            namespace,
            where="type = ? AND created_at >= ? AND created_at <= ? AND t_invalid IS NULL "
            "AND confidence = ? AND coalesce(substr(last_validated, 1, 13), '') = ?",
            params=(bucket.type, start, end, bucket.confidence, validated),
            order="created_at, id",
            with_entities=False,
        )

    def namespaces(self) -> list[str]:
        return [
            row["namespace"]
            for row in self._q("SELECT DISTINCT namespace FROM memories ORDER BY 1")
        ]

    def stored_neighbours(
        self, namespace: str, memory_ids: Sequence[str], window: int
    ) -> dict[str, list[StoredNeighbour]]:
        """Memories stored just before and after each of ``memory_ids`` in ``namespace``.

        Storage order is (created_at, rowid). Per memory: up to ``window`` on each side as
        (id, offset -window..-1 / 1..window, created_at of the neighbour, created_at of the
        memory, current = t_invalid is null, whether the memory asks a question, the
        neighbour's type, the memory's type)."""
        out: dict[str, list[StoredNeighbour]] = {}
        if window <= 0 or not memory_ids:
            return out
        with self._lock:
            for memory_id in memory_ids:
                row = self._conn.execute(
                    "SELECT created_at, rowid AS r, type, "
                    f"substr(rtrim(content, ' ' || char(9, 10, 13)), -{ASK_TAIL}) AS tail "
                    "FROM memories WHERE id = ? AND namespace = ?",
                    (memory_id, namespace),
                ).fetchone()
                if row is None:
                    continue
                own = (row["created_at"], row["r"])
                hit_asks = asks_question(row["tail"] or "")
                found: list[StoredNeighbour] = []
                for op, order, sign in (("<", "DESC", -1), (">", "ASC", 1)):
                    rows = self._conn.execute(
                        "SELECT id, created_at, t_invalid IS NULL AS current, type FROM memories "
                        f"WHERE namespace = ? AND (created_at, rowid) {op} (?, ?) "
                        f"ORDER BY created_at {order}, rowid {order} LIMIT ?",
                        (namespace, own[0], own[1], window),
                    ).fetchall()
                    for offset, near in enumerate(rows, start=1):
                        found.append(
                            (
                                near["id"],
                                sign * offset,
                                near["created_at"],
                                own[0],
                                bool(near["current"]),
                                hit_asks,
                                near["type"],
                                row["type"],
                            )
                        )
                out[memory_id] = found
        return out

    def recent_memories(self, namespace: str, limit: int) -> list[Memory]:
        return self.memories_in_namespace(
            namespace, where="t_invalid IS NULL", order="created_at DESC, id DESC", limit=limit
        )

    def referencing_sources(self, memory_ids: Sequence[str]) -> set[str]:
        """Which of ``memory_ids`` are cited as ``source`` by a semantic fact."""
        cited: set[str] = set()
        for chunk in _chunks(list(memory_ids)):
            candidates = [f"memory:{mid}" for mid in chunk] + [f"episodic:{mid}" for mid in chunk]
            candidates += list(chunk)
            marks = ",".join("?" * len(candidates))
            rows = self._q(
                f"SELECT source FROM memories WHERE type = 'semantic' AND source IN ({marks})",
                candidates,
            )
            for row in rows:
                source = str(row["source"])
                cited.add(source.split(":", 1)[1] if ":" in source else source)
        return cited

    def bump_access(self, memory_ids: Sequence[str], at: datetime, counts: dict[str, int]) -> None:
        stamp = to_iso(at)
        with self.transaction():
            for memory_id in memory_ids:
                self._x(
                    "UPDATE memories SET last_accessed = ?, access_count = access_count + ? "
                    "WHERE id = ?",
                    (stamp, counts.get(memory_id, 1), memory_id),
                )

    def contradiction_groups(self, namespace: str, limit: int | None = None) -> list[list[Memory]]:
        """Current single-valued facts sharing subject + canonical predicate, objects differing."""
        sql = (
            "SELECT subject_entity_id, predicate_canonical FROM memories WHERE namespace = ? AND "
            "type = 'semantic' AND t_invalid IS NULL AND multi_valued = 0 AND "
            "subject_entity_id IS NOT NULL GROUP BY subject_entity_id, predicate_canonical "
            "HAVING COUNT(DISTINCT lower(trim(object))) > 1 ORDER BY MIN(created_at), 1, 2"
        )
        args: list[Any] = [namespace]
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        groups = []
        for row in self._q(sql, args):
            facts = [
                f
                for f in self.facts_for_predicate(
                    namespace, int(row["subject_entity_id"]), row["predicate_canonical"]
                )
                if f.t_invalid is None and not f.multi_valued
            ]
            groups.append(facts)
        return groups

    def count_contradictions(self, namespace: str) -> int:
        rows = self._q(
            "SELECT COUNT(*) AS n FROM (SELECT 1 FROM memories WHERE namespace = ? AND "
            "type = 'semantic' AND t_invalid IS NULL AND multi_valued = 0 AND "
            "subject_entity_id IS NOT NULL GROUP BY subject_entity_id, predicate_canonical "
            "HAVING COUNT(DISTINCT lower(trim(object))) > 1)",
            (namespace,),
        )
        return int(rows[0]["n"])

    # ------------------------------------------------------------------ entities

    def entity_by_name(self, namespace: str, name: str) -> EntityRow | None:
        rows = self._q("SELECT * FROM entities WHERE namespace = ? AND name = ?", (namespace, name))
        if rows:
            return _row_to_entity(rows[0])
        rows = self._q(
            "SELECT e.* FROM entity_aliases a JOIN entities e ON e.id = a.entity_id "
            "WHERE a.namespace = ? AND a.alias = ?",
            (namespace, name),
        )
        return _row_to_entity(rows[0]) if rows else None

    def entity(self, entity_id: int) -> EntityRow | None:
        rows = self._q("SELECT * FROM entities WHERE id = ?", (entity_id,))
        return _row_to_entity(rows[0]) if rows else None

    def entities_by_ids(self, entity_ids: Sequence[int]) -> dict[int, EntityRow]:
        out: dict[int, EntityRow] = {}
        for chunk in _chunks(list(entity_ids)):
            marks = ",".join("?" * len(chunk))
            for row in self._q(f"SELECT * FROM entities WHERE id IN ({marks})", chunk):
                out[int(row["id"])] = _row_to_entity(row)
        return out

    def entity_names(self, namespace: str) -> list[tuple[str, int]]:
        """Every canonical name and alias of the namespace, with its entity id."""
        rows = self._q(
            "SELECT name AS n, id AS e FROM entities WHERE namespace = ? "
            "UNION ALL SELECT alias AS n, entity_id AS e FROM entity_aliases WHERE namespace = ? "
            "ORDER BY 2, 1",
            (namespace, namespace),
        )
        return [(row["n"], int(row["e"])) for row in rows]

    def entity_embeddings(self, namespace: str) -> tuple[list[int], np.ndarray | None]:
        rows = self._q(
            "SELECT id, embedding FROM entities WHERE namespace = ? AND embedding IS NOT NULL "
            "ORDER BY id",
            (namespace,),
        )
        if not rows:
            return [], None
        ids = [int(row["id"]) for row in rows]
        matrix = np.vstack([np.frombuffer(row["embedding"], dtype=np.float32) for row in rows])
        return ids, matrix

    def create_entity(
        self,
        namespace: str,
        name: str,
        display_name: str,
        embedding: np.ndarray | None,
        at: datetime,
        entity_type: str | None = None,
    ) -> int:
        blob = None if embedding is None else np.asarray(embedding, dtype=np.float32).tobytes()
        cursor = self._x(
            "INSERT INTO entities (namespace, name, display_name, entity_type, embedding, "
            "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (namespace, name, display_name, entity_type, blob, to_iso(at), to_iso(at)),
        )
        return int(cursor.lastrowid or 0)

    def insert_entity_row(self, row: dict[str, Any]) -> int:
        """Import path: recreate an entity (keeping its id when free)."""
        cursor = self._x(
            "INSERT INTO entities (id, namespace, name, display_name, entity_type, embedding, "
            "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                row.get("id"),
                row["namespace"],
                row["name"],
                row["display_name"],
                row.get("entity_type"),
                row.get("embedding"),
                row["created_at"],
                row["updated_at"],
            ),
        )
        return int(cursor.lastrowid or 0)

    def set_entity_embedding(self, entity_id: int, embedding: np.ndarray) -> None:
        blob = np.asarray(embedding, dtype=np.float32).tobytes()
        self._x("UPDATE entities SET embedding = ? WHERE id = ?", (blob, entity_id))

    def touch_entity(self, entity_id: int, at: datetime) -> None:
        self._x("UPDATE entities SET updated_at = ? WHERE id = ?", (to_iso(at), entity_id))

    def add_alias(
        self, namespace: str, alias: str, entity_id: int, method: str, score: float, at: datetime
    ) -> None:
        self._x(
            "INSERT OR IGNORE INTO entity_aliases (namespace, alias, entity_id, method, score, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?)",
            (namespace, alias, entity_id, method, float(score), to_iso(at)),
        )

    def aliases_of(self, entity_ids: Sequence[int]) -> dict[int, list[dict[str, Any]]]:
        out: dict[int, list[dict[str, Any]]] = {}
        for chunk in _chunks(list(entity_ids)):
            marks = ",".join("?" * len(chunk))
            rows = self._q(
                "SELECT entity_id, alias, method, score, created_at FROM entity_aliases "
                f"WHERE entity_id IN ({marks}) ORDER BY alias",
                chunk,
            )
            for row in rows:
                out.setdefault(int(row["entity_id"]), []).append(
                    {
                        "alias": row["alias"],
                        "method": row["method"],
                        "score": row["score"],
                        "created_at": row["created_at"],
                    }
                )
        return out

    def add_alias_candidate(
        self, namespace: str, name: str, entity_id: int, score: float, at: datetime
    ) -> None:
        self._x(
            "INSERT INTO alias_candidates (namespace, name, entity_id, score, created_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT(namespace, name, entity_id) "
            "DO UPDATE SET score = MAX(score, excluded.score)",
            (namespace, name, entity_id, float(score), to_iso(at)),
        )

    def alias_candidates(self, namespace: str, limit: int) -> list[dict[str, Any]]:
        rows = self._q(
            "SELECT c.name, c.score, e.id AS entity_id, e.display_name FROM alias_candidates c "
            "JOIN entities e ON e.id = c.entity_id WHERE c.namespace = ? "
            "ORDER BY c.score DESC, c.name LIMIT ?",
            (namespace, limit),
        )
        return [dict(row) for row in rows]

    def link_entities(self, memory_id: str, entity_ids: Iterable[int]) -> None:
        for entity_id in dict.fromkeys(entity_ids):
            self._x(
                "INSERT OR IGNORE INTO memory_entities (memory_id, entity_id) VALUES (?, ?)",
                (memory_id, entity_id),
            )

    def orphan_entities(self, entity_ids: Sequence[int]) -> list[int]:
        """Of ``entity_ids``, those no memory links to and no fact uses as subject."""
        orphans = []
        for entity_id in dict.fromkeys(entity_ids):
            linked = self._q(
                "SELECT 1 FROM memory_entities WHERE entity_id = ? LIMIT 1", (entity_id,)
            ) or self._q("SELECT 1 FROM memories WHERE subject_entity_id = ? LIMIT 1", (entity_id,))
            if not linked:
                orphans.append(entity_id)
        return orphans

    def delete_entities(self, entity_ids: Sequence[int]) -> None:
        for chunk in _chunks(list(entity_ids)):
            marks = ",".join("?" * len(chunk))
            self._x(f"DELETE FROM entities WHERE id IN ({marks})", chunk)

    def count_entities(self, namespace: str) -> int:
        return int(
            self._q("SELECT COUNT(*) AS n FROM entities WHERE namespace = ?", (namespace,))[0]["n"]
        )

    def inactive_entities(
        self, namespace: str, before: datetime, limit: int
    ) -> list[dict[str, Any]]:
        """Entities whose newest linked memory is older than ``before`` (or that have none)."""
        rows = self._q(
            "SELECT e.id, e.display_name, MAX(m.created_at) AS last_reference, "
            "COUNT(m.id) AS memories FROM entities e "
            "LEFT JOIN memory_entities me ON me.entity_id = e.id "
            "LEFT JOIN memories m ON m.id = me.memory_id "
            "WHERE e.namespace = ? GROUP BY e.id "
            "HAVING last_reference IS NULL OR last_reference < ? "
            "ORDER BY last_reference, e.id LIMIT ?",
            (namespace, to_iso(before), limit),
        )
        return [dict(row) for row in rows]

    def entities_of_namespace(self, namespace: str | None) -> list[dict[str, Any]]:
        sql = "SELECT * FROM entities"
        args: list[Any] = []
        if namespace is not None:
            sql += " WHERE namespace = ?"
            args.append(namespace)
        rows = self._q(sql + " ORDER BY id", args)
        return [dict(row) for row in rows]

    def candidates_of_namespace(self, namespace: str | None) -> list[dict[str, Any]]:
        sql = "SELECT * FROM alias_candidates"
        args: list[Any] = []
        if namespace is not None:
            sql += " WHERE namespace = ?"
            args.append(namespace)
        return [dict(row) for row in self._q(sql + " ORDER BY entity_id, name", args)]

    # ------------------------------------------------------------------ journal

    def journal_add(self, op: str, memory_id: str, namespace: str, at: datetime) -> int:
        cursor = self._x(
            "INSERT INTO journal (op, memory_id, namespace, created_at) VALUES (?, ?, ?, ?)",
            (op, memory_id, namespace, to_iso(at)),
        )
        return int(cursor.lastrowid or 0)

    def journal_done(self, seqs: Sequence[int]) -> None:
        """Clears finished journal entries without waiting for the disk (no fsync of its own:
        the next durable commit carries it). Losing it to a power cut only replays writes
        that are already in the index, which replay makes again idempotently; a write's own
        commit stays durable. Saves one of a store's two fsyncs."""
        with self._lock:
            light = not self._in_tx and self._synchronous.upper() in {"FULL", "EXTRA"}
            if light:
                self._conn.execute("PRAGMA synchronous=NORMAL")
            try:
                with self.transaction():
                    for chunk in _chunks(list(seqs)):
                        marks = ",".join("?" * len(chunk))
                        self._x(f"DELETE FROM journal WHERE seq IN ({marks})", chunk)
            finally:
                if light:
                    self._conn.execute(f"PRAGMA synchronous={self._synchronous}")

    def journal_pending(self, limit: int | None = None) -> list[JournalEntry]:
        sql = "SELECT seq, op, memory_id, namespace FROM journal ORDER BY seq"
        args: list[Any] = []
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        return [
            JournalEntry(int(r["seq"]), r["op"], r["memory_id"], r["namespace"])
            for r in self._q(sql, args)
        ]

    def journal_backlog(self) -> int:
        return int(self._q("SELECT COUNT(*) AS n FROM journal")[0]["n"])

    # ------------------------------------------------------------------ audit

    def audit(
        self,
        namespace: str,
        action: str,
        at: datetime,
        memory_id: str | None = None,
        other_id: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        self._x(
            "INSERT INTO audit (at, namespace, action, memory_id, other_id, detail) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                to_iso(at),
                namespace,
                action,
                memory_id,
                other_id,
                None if detail is None else json.dumps(detail, sort_keys=True),
            ),
        )

    def insert_audit_row(self, row: Sequence[Any]) -> None:
        """Import path: (at, namespace, action, memory_id, other_id, detail JSON)."""
        self._x(
            "INSERT INTO audit (at, namespace, action, memory_id, other_id, detail) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            tuple(row),
        )

    def audit_entries(
        self, namespace: str | None = None, action: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        sql = "SELECT * FROM audit WHERE 1=1"
        args: list[Any] = []
        if namespace is not None:
            sql += " AND namespace = ?"
            args.append(namespace)
        if action is not None:
            sql += " AND action = ?"
            args.append(action)
        sql += " ORDER BY seq DESC LIMIT ?"
        args.append(limit)
        out = []
        for row in self._q(sql, args):
            item = dict(row)
            item["detail"] = json.loads(item["detail"]) if item["detail"] else None
            out.append(item)
        return out

    def count_audit(self, namespace: str, action: str) -> int:
        return int(
            self._q(
                "SELECT COUNT(*) AS n FROM audit WHERE namespace = ? AND action = ?",
                (namespace, action),
            )[0]["n"]
        )

    def last_audit_at(self, namespace: str, action: str) -> str | None:
        rows = self._q(
            "SELECT MAX(at) AS at FROM audit WHERE namespace = ? AND action = ?",
            (namespace, action),
        )
        return rows[0]["at"] if rows else None

    # ------------------------------------------------------------------ size

    def data_sizes(self, memory_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
        """memory id -> (bytes of its text fields, vector points): what the storage budget
        counts of each memory (``core/lifecycle.memory_size``)."""
        select = f"SELECT id, {_TEXT_BYTES} AS text_bytes, chunk_count FROM memories"
        rows = []
        for chunk in _chunks(list(memory_ids)):
            marks = ",".join("?" * len(chunk))
            rows.extend(self._q(f"{select} WHERE id IN ({marks})", chunk))
        return {row["id"]: (int(row["text_bytes"]), int(row["chunk_count"])) for row in rows}

    def data_totals(self) -> tuple[int, int, int]:
        """(memories, bytes of their text fields, vector points) over the whole store, in one
        aggregate query: the storage budget's total without reading every row."""
        row = self._q(
            f"SELECT COUNT(*) AS n, COALESCE(SUM({_TEXT_BYTES}), 0) AS text_bytes, "
            "COALESCE(SUM(MAX(chunk_count, 1)), 0) AS points FROM memories"
        )[0]
        return int(row["n"]), int(row["text_bytes"]), int(row["points"])

    def size_bytes(self) -> int:
        total = 0
        for suffix in ("", "-wal", "-shm"):
            candidate = Path(f"{self.path}{suffix}")
            if candidate.exists():
                total += candidate.stat().st_blocks * 512
        return total


_BROWSE_ORDER = {
    "date": "event_time DESC, created_at DESC, id",
    "stored": "created_at DESC, id",
    "type": "type, event_time DESC, id",
    "first": "created_at, id",
}

_UPDATABLE = {
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


def _memory_params(memory: Memory) -> tuple[Any, ...]:
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
        _ts(memory.t_valid),
        _ts(memory.t_invalid),
        memory.superseded_by,
        _ts(memory.last_accessed),
        _ts(memory.last_validated),
        int(memory.access_count),
        int(memory.pinned),
        int(memory.multi_valued),
        int(memory.chunk_count),
        memory.embed_model,
    )


def _row_to_memory(row: sqlite3.Row) -> Memory:
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
        t_valid=_dt(row["t_valid"]),
        t_invalid=_dt(row["t_invalid"]),
        superseded_by=row["superseded_by"],
        last_accessed=_dt(row["last_accessed"]),
        last_validated=_dt(row["last_validated"]),
        access_count=int(row["access_count"]),
        pinned=bool(row["pinned"]),
        multi_valued=bool(row["multi_valued"]),
        chunk_count=int(row["chunk_count"]),
        embed_model=row["embed_model"],
    )


def _row_to_entity(row: sqlite3.Row) -> EntityRow:
    return EntityRow(
        id=int(row["id"]),
        namespace=row["namespace"],
        name=row["name"],
        display_name=row["display_name"],
        entity_type=row["entity_type"],
        created_at=from_iso(row["created_at"]),
        updated_at=from_iso(row["updated_at"]),
    )
