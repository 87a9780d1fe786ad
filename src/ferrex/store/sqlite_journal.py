"""The SQLite rows of the dual-write journal and the audit log, the storage totals, and the
scrub that leaves no deleted text behind. Mixed into ``ferrex.store.sqlite.SqliteStore``."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from ferrex.core.clock import to_iso
from ferrex.core.ports import (
    JournalEntry,
)
from ferrex.store.sqlite_rows import (
    TEXT_BYTES,
    SqliteRows,
    in_chunks,
)


class JournalRows(SqliteRows):
    """``journal`` and ``audit`` rows, storage sizes, scrubbing."""

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
                    for chunk in in_chunks(list(seqs)):
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
        select = f"SELECT id, {TEXT_BYTES} AS text_bytes, chunk_count FROM memories"
        rows = []
        for chunk in in_chunks(list(memory_ids)):
            marks = ",".join("?" * len(chunk))
            rows.extend(self._q(f"{select} WHERE id IN ({marks})", chunk))
        return {row["id"]: (int(row["text_bytes"]), int(row["chunk_count"])) for row in rows}

    def data_totals(self) -> tuple[int, int, int]:
        """(memories, bytes of their text fields, vector points) over the whole store, in one
        aggregate query: the storage budget's total without reading every row."""
        row = self._q(
            f"SELECT COUNT(*) AS n, COALESCE(SUM({TEXT_BYTES}), 0) AS text_bytes, "
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

    def audit_details(
        self, after: int = 0, seqs: Sequence[int] = ()
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """(seq, detail) of every audit row that has a detail, by seq: those after ``after``
        and those of ``seqs``."""
        query = "SELECT seq, detail FROM audit WHERE detail IS NOT NULL"
        earlier = sorted({seq for seq in seqs if seq <= after})
        for chunk in in_chunks(earlier):
            marks = ",".join("?" * len(chunk))
            for row in self._q(f"{query} AND seq IN ({marks}) ORDER BY seq", chunk):
                yield int(row["seq"]), json.loads(row["detail"])
        last = after
        while True:  # in batches: the whole log on a first scan
            rows = self._q(f"{query} AND seq > ? ORDER BY seq LIMIT 1000", (last,))
            for row in rows:
                yield int(row["seq"]), json.loads(row["detail"])
            if len(rows) < 1000:
                return
            last = int(rows[-1]["seq"])

    # ------------------------------------------------------------------ text writes

    def text_writes_start(self) -> tuple[bool, int, int]:
        """Record from now on which memories' text and which audit details are written
        (``text_writes``, schema 4): whether it already did, and the positions so far (the
        last write recorded; the last audit row: AUTOINCREMENT, never reused, and audit rows
        are never deleted)."""
        with self.transaction():
            was_on = bool(self._q("SELECT 1 FROM meta WHERE key = 'text_writes'"))
            if not was_on:
                self._x("INSERT INTO meta (key, value) VALUES ('text_writes', 'on')")
            rows = self._q("SELECT seq FROM sqlite_sequence WHERE name = 'text_writes'")
            audit = self._q("SELECT COALESCE(MAX(seq), 0) AS n FROM audit")[0]["n"]
            return was_on, (int(rows[0]["seq"]) if rows else 0), int(audit)

    def text_writes_since(self, position: int) -> tuple[list[str], list[int]]:
        """The memory ids whose text, and the audit seqs whose detail, were written after
        ``position``, in order, once each."""
        memory_ids: dict[str, None] = {}
        audit_seqs: dict[int, None] = {}
        for row in self._q(
            "SELECT memory_id, audit_seq FROM text_writes WHERE seq > ? ORDER BY seq", (position,)
        ):
            if row["memory_id"] is not None:
                memory_ids[row["memory_id"]] = None
            if row["audit_seq"] is not None:
                audit_seqs[int(row["audit_seq"])] = None
        return list(memory_ids), list(audit_seqs)

    def text_writes_forget(self, position: int) -> None:
        """Drop the record of the writes up to ``position`` (scanned)."""
        self._x("DELETE FROM text_writes WHERE seq <= ?", (position,))

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
