"""The SQLite rows of entities: names, embeddings, aliases and alias candidates, the links
between memories and entities. Mixed into ``ferrex.store.sqlite.SqliteStore``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from ferrex.core.clock import to_iso
from ferrex.core.ports import (
    EntityRow,
)
from ferrex.store.sqlite_rows import (
    SqliteRows,
    in_chunks,
    row_to_entity,
)


class EntityRows(SqliteRows):
    """``entities``, ``entity_aliases``, ``alias_candidates`` and ``memory_entities`` rows."""

    def entity_by_name(self, namespace: str, name: str) -> EntityRow | None:
        rows = self._q("SELECT * FROM entities WHERE namespace = ? AND name = ?", (namespace, name))
        if rows:
            return row_to_entity(rows[0])
        rows = self._q(
            "SELECT e.* FROM entity_aliases a JOIN entities e ON e.id = a.entity_id "
            "WHERE a.namespace = ? AND a.alias = ?",
            (namespace, name),
        )
        return row_to_entity(rows[0]) if rows else None

    def entity(self, entity_id: int) -> EntityRow | None:
        rows = self._q("SELECT * FROM entities WHERE id = ?", (entity_id,))
        return row_to_entity(rows[0]) if rows else None

    def entities_by_ids(self, entity_ids: Sequence[int]) -> dict[int, EntityRow]:
        out: dict[int, EntityRow] = {}
        for chunk in in_chunks(list(entity_ids)):
            marks = ",".join("?" * len(chunk))
            for row in self._q(f"SELECT * FROM entities WHERE id IN ({marks})", chunk):
                out[int(row["id"])] = row_to_entity(row)
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
        for chunk in in_chunks(list(entity_ids)):
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
        for chunk in in_chunks(list(entity_ids)):
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
