"""The SQLite rows of memories: insert, read, update and delete them, facts by subject and
predicate, listings and counts by namespace, type and review bucket, stored neighbours,
contradiction groups. Mixed into ``ferrex.store.sqlite.SqliteStore``."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from ferrex.core.clock import to_iso
from ferrex.core.memory import Memory, MemoryType
from ferrex.core.ports import (
    MemoryCount,
    ReviewBucket,
    StoredNeighbour,
)
from ferrex.core.recall.context import ASK_TAIL, asks_question
from ferrex.store.sqlite_rows import (
    BROWSE_ORDER,
    MEMORY_COLUMNS,
    TEXT_COLUMNS,
    UPDATABLE,
    SqliteRows,
    in_chunks,
    memory_params,
    row_to_memory,
)


class MemoryRows(SqliteRows):
    """``memories`` rows (and their entity links as read back)."""

    def insert_memory(self, memory: Memory) -> None:
        self._x(
            f"INSERT INTO memories ({MEMORY_COLUMNS}) VALUES ({', '.join('?' * 29)})",
            memory_params(memory),
        )

    def replace_memory(self, memory: Memory) -> None:
        self._x(
            f"INSERT OR REPLACE INTO memories ({MEMORY_COLUMNS}) VALUES ({', '.join('?' * 29)})",
            memory_params(memory),
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
        for chunk in in_chunks(ids):
            marks = ",".join("?" * len(chunk))
            for row in self._q(
                f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id IN ({marks})", chunk
            ):
                out[row["id"]] = row_to_memory(row)
        self._attach_entities(out)
        return out

    def superseding(self, memory_ids: Sequence[str]) -> set[str]:
        """Which of ``memory_ids`` superseded another memory (idx_memories_superseded_by)."""
        out: set[str] = set()
        for chunk in in_chunks(list(dict.fromkeys(memory_ids))):
            marks = ",".join("?" * len(chunk))
            out.update(
                row["superseded_by"]
                for row in self._q(
                    f"SELECT DISTINCT superseded_by FROM memories WHERE superseded_by IN ({marks})",
                    chunk,
                )
            )
        return out

    def _attach_entities(self, memories: dict[str, Memory]) -> None:
        ids = list(memories)
        for chunk in in_chunks(ids):
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
            if key not in UPDATABLE:
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
        columns = MEMORY_COLUMNS.replace(" ", "").split(",")
        params = dict(zip(columns, memory_params(memory), strict=True))
        self._x(
            "UPDATE memories SET "
            + ", ".join(f"{name} = ?" for name in TEXT_COLUMNS)
            + " WHERE id = ?",
            [*(params[name] for name in TEXT_COLUMNS), memory.id],
        )

    def delete_memories(self, memory_ids: Sequence[str]) -> None:
        for chunk in in_chunks(list(memory_ids)):
            marks = ",".join("?" * len(chunk))
            self._x(f"DELETE FROM memories WHERE id IN ({marks})", chunk)
            # A replaced memory never names a successor that is gone (forget, eviction).
            self._x(
                f"UPDATE memories SET superseded_by = NULL WHERE superseded_by IN ({marks})", chunk
            )

    def existing_ids(self, memory_ids: Sequence[str], namespace: str | None = None) -> set[str]:
        found: set[str] = set()
        for chunk in in_chunks(list(memory_ids)):
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
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE namespace = ? AND type = 'semantic' "
            "AND subject_entity_id = ? AND t_invalid IS NULL ORDER BY created_at, id",
            (namespace, subject_entity_id),
        )
        return self._with_entities(rows)

    def facts_for_predicate(
        self, namespace: str, subject_entity_id: int, predicate_canonical: str
    ) -> list[Memory]:
        rows = self._q(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE namespace = ? AND type = 'semantic' "
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
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE namespace = ? AND type = 'procedural' "
            "AND name = ? ORDER BY version",
            (namespace, name),
        )
        return self._with_entities(rows)

    def _with_entities(self, rows: Iterable[sqlite3.Row]) -> list[Memory]:
        memories = {row["id"]: row_to_memory(row) for row in rows}
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
        sql = f"SELECT {MEMORY_COLUMNS} FROM memories WHERE {where}"
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
            return [row_to_memory(row) for row in rows]
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
        for chunk in in_chunks(list(memory_ids)):
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
            namespace, where=where, params=params, order=BROWSE_ORDER[sort], with_entities=False
        )

    def iter_memories(self, namespace: str | None = None, batch: int = 500) -> Iterator[Memory]:
        """Every memory in insertion order (rowid), in batches (export, rebuild, doctor).

        Insertion order matters: the vector engine orders exact score ties by storage position,
        so a rebuild or an import that re-inserts in the same order ranks ties the same way.
        """
        last = 0
        while True:
            sql = f"SELECT rowid AS _rowid, {MEMORY_COLUMNS} FROM memories WHERE rowid > ?"
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
        for chunk in in_chunks(list(memory_ids)):
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
