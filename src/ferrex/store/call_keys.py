"""The SQLite rows of exactly-once calls (``call_keys``, schema 3): a write forwarded between
ferrex processes is recorded under its key, with its answer, in the write's own transaction
(see ``ferrex.core.call_keys``). Mixed into ``ferrex.store.sqlite.SqliteStore``."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ferrex.core.clock import to_iso


class CallKeyRows:
    """``call_keys`` rows on the store's one connection (``_q`` / ``_x`` are the store's)."""

    def _q(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        raise NotImplementedError  # pragma: no cover - the store defines it

    def _x(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        raise NotImplementedError  # pragma: no cover - the store defines it

    def call_answer(self, key: str) -> str | None:
        """The answer recorded under ``key`` (JSON text), if a call with it was applied."""
        rows = self._q("SELECT answer FROM call_keys WHERE key = ?", (key,))
        return str(rows[0]["answer"]) if rows else None

    def record_call(
        self, key: str, op: str, namespace: str, answer: str, at: datetime, forget_before: datetime
    ) -> None:
        """Record a call's answer under its key (inside the caller's transaction), and drop
        the keys older than ``forget_before`` (no retry comes that late)."""
        self._x("DELETE FROM call_keys WHERE created_at < ?", (to_iso(forget_before),))
        self._x(
            "INSERT INTO call_keys (key, op, namespace, answer, created_at) VALUES (?, ?, ?, ?, ?)",
            (key, op, namespace, answer, to_iso(at)),
        )
