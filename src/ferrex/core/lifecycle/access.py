"""Access tracking (spec Layer 3): every recall hit bumps ``last_accessed`` and ``access_count``.

Bumps are queued in memory and written in batches by a background thread, never on the path of
the recall response. Access is a popularity signal only: it never touches ``last_validated``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime

import structlog

log = structlog.get_logger("ferrex.access")

WriteFn = Callable[[Sequence[str], datetime, dict[str, int]], None]


class AccessTracker:
    def __init__(self, write: WriteFn, clock: Callable[[], datetime], interval: float) -> None:
        self._write = write
        self._clock = clock
        self._interval = interval
        self._pending: dict[str, int] = {}
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ferrex-access", daemon=True)
            self._thread.start()

    def record(self, memory_ids: Sequence[str]) -> None:
        with self._lock:
            for memory_id in memory_ids:
                self._pending[memory_id] = self._pending.get(memory_id, 0) + 1

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def flush(self) -> int:
        with self._flush_lock:
            with self._lock:
                batch, self._pending = self._pending, {}
            if not batch:
                return 0
            try:
                self._write(sorted(batch), self._clock(), batch)
            except Exception as exc:  # keep the counts for the next attempt
                log.warning("access bump failed; will retry", error=str(exc)[:200])
                with self._lock:
                    for key, count in batch.items():
                        self._pending[key] = self._pending.get(key, 0) + count
                return 0
            return len(batch)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.flush()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.flush()
