"""MemoryService: store / recall / forget / reflect / stats over the ports.

Blocking by design (model inference, SQLite, the embedded engine); the MCP server runs it in
worker threads. Writes are serialized by one lock; reads run concurrently.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

import structlog

from ferrex.config import Settings
from ferrex.core import errors
from ferrex.core.access import AccessTracker
from ferrex.core.cache import RecallCache
from ferrex.core.clock import Clock, utcnow
from ferrex.core.entities import EntityResolver
from ferrex.core.errors import FerrexError
from ferrex.core.ingest import IngestMixin
from ferrex.core.lifecycle import (
    choose_evictions,
    eviction_candidates,
    memory_size,
    store_size,
    superseded_past_retention,
)
from ferrex.core.memory import Memory, MemoryType
from ferrex.core.ports import (
    Embedder,
    MetadataStore,
    ModelInfo,
    Reranker,
    SparseEncoder,
    Vector,
    VectorIndex,
)
from ferrex.core.predicates import PredicateNormalizer
from ferrex.core.recall import RecallMixin
from ferrex.core.requests import (
    ForgetRequest,
    ReflectRequest,
    StatsRequest,
    parse,
)
from ferrex.core.staleness import assess
from ferrex.core.sync import (
    PHASE_AFTER_COMMIT,
    PHASE_AFTER_INDEX,
    PHASE_BEFORE_COMMIT,
    IndexSync,
)
from ferrex.core.sync import checkpoint as _checkpoint

log = structlog.get_logger("ferrex.service")

PIN_NAME = "embedding_model"
PIN_DIMENSION = "embedding_dimension"
PIN_VARIANT = "embedding_variant"
PIN_SOURCE = "embedding_source"
MODEL_RETRY_SECONDS = 60.0  # how often stats retries loading a model that failed
REBUILD_PENDING = "rebuild_pending"
# Model a pending `rebuild-index --model-tier` re-embeds with (a restart resumes with it).
REBUILD_TARGET = "rebuild_target_model"
REBUILD_TARGET_VARIANT = "rebuild_target_variant"


class ModelMismatchError(FerrexError):
    def __init__(self, message: str) -> None:
        super().__init__(errors.MODEL_MISMATCH, message)


class MemoryService(IngestMixin, RecallMixin):
    def __init__(
        self,
        settings: Settings,
        meta: MetadataStore,
        index: VectorIndex,
        embedder: Embedder,
        sparse: SparseEncoder,
        reranker: Reranker,
        *,
        clock: Clock = utcnow,
        explicit_model: bool = False,
    ) -> None:
        self.settings = settings
        self.meta = meta
        self.index = index
        self.embedder = embedder
        self.sparse = sparse
        self.reranker = reranker
        self.clock = clock
        self.explicit_model = explicit_model
        self.sync = IndexSync(settings, meta, index, embedder, sparse)
        self.entities = EntityResolver(
            meta,
            self._embed_names,
            fuzzy_threshold=settings.entities.fuzzy_threshold,
            embedding_threshold=settings.entities.embedding_threshold,
            candidate_threshold=settings.entities.candidate_threshold,
        )
        self.cache = RecallCache(settings.cache.size, settings.cache.enabled)
        self.access = AccessTracker(
            meta.bump_access, clock, settings.lifecycle.access_flush_seconds
        )
        self._write = threading.RLock()
        self._ready_lock = threading.Lock()
        self._ready = False
        self._normalizers: dict[str, PredicateNormalizer] = {}
        self._data_version = meta.data_version()
        self._last_retention_sweep = 0.0
        self._model_error: str | None = None
        self._model_error_at = -float("inf")
        self._closed = False

    # ================================================================== lifecycle

    @property
    def namespace(self) -> str:
        return self.settings.namespace

    def check_pin(self) -> None:
        """Refuse, before loading anything, a configured model that differs from the store's."""
        pinned = self.meta.get_meta(PIN_NAME)
        if pinned is None or not self.explicit_model:
            return
        intended = getattr(self.embedder, "intended", None)
        if intended is not None and intended.name.lower() != pinned.lower():
            raise ModelMismatchError(self._mismatch_message(pinned, intended.name))

    def check_peer_model(self, name: str, dimension: int | None) -> None:
        """Refuse a peer process configured (``--model-tier``) for another model than this
        engine's: the store's pin, or the model this engine is about to pin. Same message as
        :meth:`check_pin` gives a process that opens the store itself."""
        pinned = self.meta.get_meta(PIN_NAME)
        pinned_dimension: str | None = self.meta.get_meta(PIN_DIMENSION)
        if pinned is None:
            own = getattr(self.embedder, "intended", None)
            if own is None:
                return
            pinned, pinned_dimension = own.name, str(own.dimension)
        same_name = name.lower() == pinned.lower()
        same_dimension = (
            dimension is None or not pinned_dimension or (str(dimension) == pinned_dimension)
        )
        if not (same_name and same_dimension):
            raise ModelMismatchError(self._mismatch_message(pinned, name, pinned_dimension))

    def _mismatch_message(self, pinned: str, configured: str, dimension: str | None = None) -> str:
        dimension = dimension or self.meta.get_meta(PIN_DIMENSION) or "?"
        return (
            f"this store was created with the embedding model {pinned} ({dimension}-d) but ferrex "
            f"is configured for {configured}. Vectors of different models cannot be compared. "
            f"Start ferrex without --model-tier (it follows the store), or re-embed everything "
            f"with `ferrex rebuild-index --model-tier <tier>`."
        )

    def ensure_ready(self) -> None:
        """Load the model, pin it, create the collection and replay the journal (once)."""
        if self._ready:
            return
        with self._ready_lock:
            if self._ready:
                return
            info = self.embedder.info
            self._pin(info)
            self.index.ensure_collection(info.dimension)
            with self._write:
                if self.meta.get_meta(REBUILD_PENDING):
                    log.warning("an index rebuild was interrupted; rebuilding now")
                    self.sync.reembed_entities()
                    self.sync.rebuild()
                    self.meta.set_meta(REBUILD_PENDING, "")
                    self.meta.delete_meta(REBUILD_TARGET)
                    self.meta.delete_meta(REBUILD_TARGET_VARIANT)
                # journal entries rolled forward at start-up (doctor reports them)
                self.replayed_at_start = self.sync.recover()
            self.access.start()
            self._ready = True
            try:
                self.sweep_retention(force=True)
                self.enforce_budget()
            except Exception as exc:  # lifecycle upkeep must never block serving
                log.warning("lifecycle upkeep failed at start-up", error=str(exc)[:200])

    def _pin(self, info: ModelInfo) -> None:
        pinned = self.meta.get_meta(PIN_NAME)
        if pinned is None:
            with self.meta.transaction():
                self.meta.set_meta(PIN_NAME, info.name)
                self.meta.set_meta(PIN_DIMENSION, str(info.dimension))
                self.meta.set_meta(PIN_VARIANT, info.variant)
                self.meta.set_meta(PIN_SOURCE, info.source)
            return
        dimension = int(self.meta.get_meta(PIN_DIMENSION) or 0)
        variant = self.meta.get_meta(PIN_VARIANT) or ""
        if pinned.lower() != info.name.lower() or dimension != info.dimension:
            raise ModelMismatchError(
                self._mismatch_message(pinned, f"{info.name} ({info.dimension}-d)")
            )
        if variant != info.variant and "local" not in (variant, info.variant):
            raise ModelMismatchError(
                f"this store was embedded with {pinned} variant '{variant or 'fastembed'}', "
                "but the "
                f"loaded model is variant '{info.variant or 'fastembed'}'; mixing them would make "
                "scores incomparable. Make the original variant available or run "
                "`ferrex rebuild-index`."
            )

    def warm_up(self) -> None:
        """Background start-up work: model, journal replay, reranker."""
        try:
            self.ensure_ready()
        except FerrexError as exc:
            log.error("start-up failed", code=exc.code, error=exc.message)
            return
        except Exception as exc:  # a background thread: one log line, never a traceback
            log.error("start-up failed", code=errors.INTERNAL, error=repr(exc)[:300])
            return
        self.index.start_background_work()  # the serving process's index upkeep
        self.reranker.load()

    def close(self) -> None:
        with self._write:  # let an in-flight write finish first
            if self._closed:
                return
            self._closed = True
            self.access.stop()
            self.index.close()
            self.meta.close()

    def now(self) -> datetime:
        return self.clock()

    # ================================================================== helpers

    def _embed_names(self, names: Sequence[str]) -> list[Vector]:
        return self.embedder.embed_documents(list(names))

    def normalizer(self, namespace: str) -> PredicateNormalizer:
        if namespace not in self._normalizers:
            self._normalizers[namespace] = PredicateNormalizer(
                self.settings.predicates.synonyms_for(namespace),
                self.settings.predicates.fuzzy_threshold,
            )
        return self._normalizers[namespace]

    def _sync_external_writes(self) -> None:
        """Another connection committed (e.g. an operator command): drop in-memory caches."""
        version = self.meta.data_version()
        if version != self._data_version:
            self._data_version = version
            self.cache.invalidate()
            self.entities.invalidate()

    def _after_write(self, namespace: str) -> None:
        self.cache.invalidate(namespace)
        self._data_version = self.meta.data_version()

    # ================================================================== forget

    def forget(self, arguments: Any) -> dict[str, Any]:
        request = parse(ForgetRequest, arguments, self.settings.limits, "forget")
        namespace = request.namespace or self.namespace
        self.ensure_ready()
        ids = list(dict.fromkeys(request.ids))
        with self._write:
            existing = self.meta.existing_ids(ids, namespace)
            deleted = [i for i in ids if i in existing]
            not_found = [i for i in ids if i not in existing]
            orphaned = self._history_left_without_value(namespace, deleted)
            removed = self._delete(
                deleted, namespace, cascade=request.cascade, action="forget", reason="forget"
            )
        answer: dict[str, Any] = {
            "deleted": deleted,
            "not_found": not_found,
            "entities_removed": removed,
            "namespace": namespace,
        }
        if orphaned:
            answer["history_without_successor"] = orphaned
            answer["note"] = (
                "these superseded facts were replaced by a forgotten one, so their subject and "
                "predicate have no current value now: store the current value again if it is known"
            )
        return answer

    @property
    def model_error(self) -> str | None:
        """Why the embedding model could not be used (stats says so), until it can."""
        return None if self._ready else self._model_error

    def _history_left_without_value(self, namespace: str, deleted: Sequence[str]) -> list[str]:
        """Facts superseded by one of ``deleted`` whose (subject, predicate) keeps no current
        value once ``deleted`` are gone (a v1 -> v2 -> v3 chain losing v2 still has v3)."""
        gone = set(deleted)
        predecessors: list[Memory] = []
        for start in range(0, len(deleted), 500):
            chunk = list(deleted[start : start + 500])
            predecessors += self.meta.memories_in_namespace(
                namespace,
                where=f"type = 'semantic' AND superseded_by IN ({','.join('?' * len(chunk))})",
                params=chunk,
                with_entities=False,
            )
        orphaned = []
        for fact in predecessors:
            if fact.id in gone or fact.subject_entity_id is None or not fact.predicate_canonical:
                continue
            still = [
                f
                for f in self.meta.facts_for_predicate(
                    namespace, fact.subject_entity_id, fact.predicate_canonical
                )
                if f.t_invalid is None and f.id not in gone
            ]
            if not still:
                orphaned.append(fact.id)
        return sorted(orphaned)

    def _delete(
        self, memory_ids: Sequence[str], namespace: str, *, cascade: bool, action: str, reason: str
    ) -> list[str]:
        """Delete memories from SQLite and the index through the journal.

        Returns the names of the entities removed by ``cascade``.
        """
        if not memory_ids:
            return []
        now = self.now()
        memories = self.meta.get_memories(list(memory_ids))
        entity_ids = sorted({e for m in memories.values() for e in m.entity_ids})
        subject_ids = sorted(
            {m.subject_entity_id for m in memories.values() if m.subject_entity_id}
        )
        removed_names: list[str] = []
        journal: list[int] = []
        with self.meta.transaction():
            for memory_id in memory_ids:
                memory = memories.get(memory_id)
                self.meta.audit(
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
                journal.append(self.meta.journal_add("delete", memory_id, namespace, now))
            self.meta.delete_memories(list(memory_ids))
            if cascade:
                orphans = self.meta.orphan_entities(sorted({*entity_ids, *subject_ids}))
                names = self.meta.entities_by_ids(orphans)
                removed_names = sorted(row.display_name for row in names.values())
                self.meta.delete_entities(orphans)
            _checkpoint(PHASE_BEFORE_COMMIT)
        _checkpoint(PHASE_AFTER_COMMIT)
        self.sync.delete(list(memory_ids))
        _checkpoint(PHASE_AFTER_INDEX)
        self.meta.journal_done(journal)
        self.entities.invalidate(namespace)
        self._after_write(namespace)
        return removed_names

    # ================================================================== lifecycle upkeep

    def sweep_retention(self, *, force: bool = False, exclude: Collection[str] = ()) -> int:
        """Evict superseded facts and episodes past the retention window (even under budget;
        procedure versions are kept for rollback). ``exclude``: ids a store's answer names."""
        if not force and time.monotonic() - self._last_retention_sweep < 3600:
            return 0
        self._last_retention_sweep = time.monotonic()
        now = self.now()
        retention = self.settings.lifecycle.superseded_retention_days
        evicted = 0
        with self._write:
            for namespace in self.meta.namespaces():
                old = self.meta.memories_in_namespace(
                    namespace,
                    where="type IN ('semantic', 'episodic') AND t_invalid IS NOT NULL "
                    "AND pinned = 0",
                    order="t_invalid, id",
                )
                expired = [
                    m.id
                    for m in old
                    if m.id not in exclude and superseded_past_retention(m, now, retention)
                ]
                if expired:
                    self._delete(
                        expired,
                        namespace,
                        cascade=False,
                        action="evict",
                        reason="superseded past retention window",
                    )
                    evicted += len(expired)
        return evicted

    def storage_bytes(self) -> int:
        """The data the memories hold, as the storage budget counts it (core/lifecycle.py)."""
        return store_size(*self.meta.data_totals(), self._vector_dimension())

    def _vector_dimension(self) -> int:
        """The pinned dimension (no model load needed); a store without a pin has no vectors."""
        pinned = self.meta.get_meta(PIN_DIMENSION)
        return int(pinned) if pinned and pinned.isdigit() else 0

    def disk_bytes(self) -> int:
        """What the store's files occupy on disk (free SQLite pages and engine preallocation
        included): at least the data, usually more."""
        return self.meta.size_bytes() + self.index.size_bytes()

    def enforce_budget(self, exclude: Collection[str] = ()) -> int:
        """Evict in the spec's priority order while the storage budget is exceeded.

        ``exclude``: ids never to evict this time (a store passes the memories it just wrote,
        so its answer never names a memory that is already gone)."""
        lifecycle = self.settings.lifecycle
        if lifecycle.max_memories <= 0 and lifecycle.max_storage_mb <= 0:
            return 0
        total = self.meta.count_memories()
        excess_memories = (
            max(0, total - lifecycle.max_memories) if lifecycle.max_memories > 0 else 0
        )
        excess_bytes = 0.0
        if lifecycle.max_storage_mb > 0:
            budget_bytes = lifecycle.max_storage_mb * 1024 * 1024
            excess_bytes = max(0.0, self.storage_bytes() - budget_bytes)
        if excess_memories <= 0 and excess_bytes <= 0:
            return 0
        now = self.now()
        dimension = self._vector_dimension()
        with self._write:
            pool = self.meta.memories_in_namespace(
                None,
                where="(type = 'episodic' OR (type = 'semantic' AND t_invalid IS NOT NULL)) "
                "AND pinned = 0",
                order="created_at, id",
            )
            levels = [(m, assess(m, now, self.settings.staleness).staleness) for m in pool]
            cited = self.meta.referencing_sources(
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
            sizes = self.meta.data_sizes([c.memory.id for c in ranked]) if excess_bytes else {}

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
                self._delete(
                    [candidate.memory.id],
                    candidate.memory.namespace,
                    cascade=False,
                    action="evict",
                    reason=candidate.reason,
                )
        if chosen:
            log.info("evicted memories over the storage budget", count=len(chosen))
        return len(chosen)

    # ================================================================== reflect / stats

    def reflect(self, arguments: Any) -> dict[str, Any]:
        from ferrex.core.reflect import reflect

        request = parse(ReflectRequest, arguments, self.settings.limits, "reflect")
        self.ensure_ready()
        return reflect(self, request)

    def stats(self, arguments: Any) -> dict[str, Any]:
        from ferrex.core.stats import stats

        request = parse(StatsRequest, arguments, self.settings.limits, "stats")
        if not self._ready and time.monotonic() - self._model_error_at > MODEL_RETRY_SECONDS:
            try:
                # Stats is the first call of a conversation: report the real model and warnings
                # and cut summaries with the model's tokenizer (it loads at start-up anyway).
                self.ensure_ready()
            except Exception as exc:  # stats answers whatever keeps the store from working
                # Said in every stats answer; retried by stats at most once a minute (store and
                # recall try on every call). Only a FerrexError's message is agent-safe.
                self._model_error = (
                    exc.message
                    if isinstance(exc, FerrexError)
                    else "the embedding model failed to load; see the server log"
                )
                self._model_error_at = time.monotonic()
                log.warning("stats before the store is ready", error=str(exc)[:300])
        self._sync_external_writes()
        return stats(self, request)

    def warnings(self, *, brief: bool = False) -> list[str]:
        """What the agent must know about degraded operation (never hidden, spec principle 5)."""
        out: list[str] = []
        if self._model_error is not None and not self._ready:
            out.append(f"not ready: {self._model_error[:160]}" if brief else self._model_error)
        loaded = getattr(self.embedder, "loaded", True)
        if loaded and self.embedder.warnings:
            if brief:
                info = self.embedder.info
                out.append(
                    f"embedding model fallback: using bundled {info.name} ({info.dimension}-d)"
                )
            else:
                out.extend(self.embedder.warnings)
        if (
            self.settings.rerank
            and not self.reranker.available
            and self.reranker.unavailable_reason
        ):
            if brief:
                out.append("reranker unavailable: results are in fused order")
            else:
                out.append(self.reranker.unavailable_reason)
        return out
