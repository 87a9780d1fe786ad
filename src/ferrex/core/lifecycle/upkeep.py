"""Removing memories (forget, eviction) and the lifecycle upkeep that evicts: the retention
sweep of superseded memories and the storage budget (rules in ``core/lifecycle/decay.py``)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Collection, Sequence

import structlog

from ferrex.core.deps import Deps
from ferrex.core.index.pins import PIN_DIMENSION
from ferrex.core.index.sync import (
    PHASE_AFTER_COMMIT,
    PHASE_AFTER_INDEX,
    PHASE_BEFORE_COMMIT,
)
from ferrex.core.index.sync import checkpoint as _checkpoint
from ferrex.core.lifecycle.decay import (
    choose_evictions,
    eviction_candidates,
    memory_size,
    store_size,
    superseded_past_retention,
)
from ferrex.core.lifecycle.staleness import assess
from ferrex.core.memory import Memory, MemoryType

log = structlog.get_logger("ferrex.upkeep")


class Upkeep:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps
        self._last_retention_sweep = 0.0

    def delete(
        self,
        memory_ids: Sequence[str],
        namespace: str,
        *,
        cascade: bool,
        action: str,
        reason: str,
        also: Callable[[list[str]], None] | None = None,
    ) -> list[str]:
        """Delete memories from SQLite and the index through the journal.

        Returns the names of the entities removed by ``cascade``. ``also`` runs inside the
        SQLite transaction, given those names (a forwarded forget records its key there).
        """
        if not memory_ids:
            return []
        deps = self.deps
        meta = deps.meta
        now = deps.now()
        memories = meta.get_memories(list(memory_ids))
        entity_ids = sorted({e for m in memories.values() for e in m.entity_ids})
        subject_ids = sorted(
            {m.subject_entity_id for m in memories.values() if m.subject_entity_id}
        )
        removed_names: list[str] = []
        journal: list[int] = []
        with meta.transaction():
            for memory_id in memory_ids:
                memory = memories.get(memory_id)
                meta.audit(
                    namespace,
                    action,
                    now,
                    memory_id=memory_id,
                    detail={
                        "reason": reason,
                        "type": memory.type.value if memory else None,
                        "summary": memory.summary(60) if memory else None,
                    },
                )
                journal.append(meta.journal_add("delete", memory_id, namespace, now))
            meta.delete_memories(list(memory_ids))
            if cascade:
                orphans = meta.orphan_entities(sorted({*entity_ids, *subject_ids}))
                names = meta.entities_by_ids(orphans)
                removed_names = sorted(row.display_name for row in names.values())
                meta.delete_entities(orphans)
            if also is not None:
                also(removed_names)
            _checkpoint(PHASE_BEFORE_COMMIT)
        # Committed: the orphan entities are gone, whatever the index steps below do.
        deps.entities.invalidate(namespace)
        _checkpoint(PHASE_AFTER_COMMIT)
        deps.sync.delete(list(memory_ids))
        _checkpoint(PHASE_AFTER_INDEX)
        meta.journal_done(journal)
        deps.after_write(namespace)
        return removed_names

    def sweep_retention(self, *, force: bool = False, exclude: Collection[str] = ()) -> int:
        """Evict superseded facts and episodes past the retention window (even under budget;
        procedure versions are kept for rollback). ``exclude``: ids a store's answer names."""
        if not force and time.monotonic() - self._last_retention_sweep < 3600:
            return 0
        self._last_retention_sweep = time.monotonic()
        deps = self.deps
        now = deps.now()
        retention = deps.settings.lifecycle.superseded_retention_days
        evicted = 0
        with deps.write:
            for namespace in deps.meta.namespaces():
                old = deps.meta.ended_unpinned(namespace)
                expired = [
                    m.id
                    for m in old
                    if m.id not in exclude and superseded_past_retention(m, now, retention)
                ]
                if expired:
                    self.delete(
                        expired,
                        namespace,
                        cascade=False,
                        action="evict",
                        reason="superseded past retention window",
                    )
                    evicted += len(expired)
        return evicted

    def storage_bytes(self) -> int:
        """The data the memories hold, as the storage budget counts it (core/lifecycle/decay.py)."""
        return store_size(*self.deps.meta.data_totals(), self.vector_dimension())

    def vector_dimension(self) -> int:
        """The pinned dimension (no model load needed); a store without a pin has no vectors."""
        pinned = self.deps.meta.get_meta(PIN_DIMENSION)
        return int(pinned) if pinned and pinned.isdigit() else 0

    def disk_bytes(self) -> int:
        """What the store's files occupy on disk (free SQLite pages and engine preallocation
        included): at least the data, usually more."""
        return self.deps.meta.size_bytes() + self.deps.index.size_bytes()

    def free_bytes(self) -> int | None:
        """Free space on the disk holding the store (None where the system does not say)."""
        try:
            return shutil.disk_usage(self.deps.settings.data_dir).free
        except OSError:
            return None

    def low_disk_warning(self, *, brief: bool = False) -> str | None:
        """A warning when the disk holding the store has less free space than
        ``lifecycle.min_free_mb`` (no path: it reaches the agent)."""
        floor = self.deps.settings.lifecycle.min_free_mb
        free = self.free_bytes()
        if floor <= 0 or free is None or free >= floor * 1024 * 1024:
            return None
        if brief:
            return f"low disk space: {free / 1024 / 1024:.0f} MB free (writes fail when full)"
        return (
            f"low disk space: {free / 1024 / 1024:.0f} MB free on the disk holding the store "
            f"(lifecycle.min_free_mb {floor:g}); writes fail with storage_full when it is full"
        )

    def enforce_budget(self, exclude: Collection[str] = ()) -> int:
        """Evict in the spec's priority order while the storage budget is exceeded.

        ``exclude``: ids never to evict this time (a store passes the memories it just wrote,
        so its answer never names a memory that is already gone)."""
        deps = self.deps
        lifecycle = deps.settings.lifecycle
        if lifecycle.max_memories <= 0 and lifecycle.max_storage_mb <= 0:
            return 0
        total = deps.meta.count_memories()
        excess_memories = (
            max(0, total - lifecycle.max_memories) if lifecycle.max_memories > 0 else 0
        )
        excess_bytes = 0.0
        if lifecycle.max_storage_mb > 0:
            budget_bytes = lifecycle.max_storage_mb * 1024 * 1024
            excess_bytes = max(0.0, self.storage_bytes() - budget_bytes)
        if excess_memories <= 0 and excess_bytes <= 0:
            return 0
        now = deps.now()
        dimension = self.vector_dimension()
        with deps.write:
            pool = deps.meta.evictable()
            levels = [(m, assess(m, now, deps.settings.staleness).staleness) for m in pool]
            cited = deps.meta.referencing_sources(
                [m.id for m in pool if m.type is MemoryType.EPISODIC]
            )
            kept = set(exclude)
            ranked = eviction_candidates(
                [(m, level) for m, level in levels if m.id not in kept],
                now=now,
                retention_days=lifecycle.superseded_retention_days,
                cited=cited,
                episodic_half_life_days=lifecycle.episodic_half_life_days,
            )
            sizes = deps.meta.data_sizes([c.memory.id for c in ranked]) if excess_bytes else {}

            def size_of(memory: Memory) -> float:
                text, chunks = sizes.get(memory.id, (0, memory.chunk_count))
                return memory_size(text, chunks, dimension)

            chosen = choose_evictions(
                ranked,
                excess_memories=excess_memories,
                excess_bytes=excess_bytes,
                size_of=size_of,
            )
            for candidate in chosen:
                self.delete(
                    [candidate.memory.id],
                    candidate.memory.namespace,
                    cascade=False,
                    action="evict",
                    reason=candidate.reason,
                )
        if chosen:
            log.info("evicted memories over the storage budget", count=len(chosen))
        return len(chosen)
