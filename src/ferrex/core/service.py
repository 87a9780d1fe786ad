"""MemoryService: store / recall / forget / reflect / stats over the ports.

Blocking by design (model inference, SQLite, the embedded engine); the MCP server runs it in
worker threads. Writes are serialized by one lock; reads run concurrently.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import structlog

from ferrex.config import Settings
from ferrex.core import conflict as conflicts
from ferrex.core import errors
from ferrex.core.access import AccessTracker
from ferrex.core.cache import CachedRecall, RecallCache, embedding_hash
from ferrex.core.chunking import Chunk, plan_chunks, step_prefix
from ferrex.core.clock import Clock, to_iso, utcnow
from ferrex.core.dedup import find_duplicate
from ferrex.core.entities import EntityResolution, EntityResolver
from ferrex.core.errors import FerrexError
from ferrex.core.ids import new_memory_id
from ferrex.core.lifecycle import choose_evictions, eviction_candidates, superseded_past_retention
from ferrex.core.memory import Memory, MemoryType, detect_type, embed_text
from ferrex.core.ports import (
    Embedder,
    IndexFilter,
    IndexHit,
    MetadataStore,
    ModelInfo,
    Reranker,
    SparseEncoder,
    Vector,
    VectorIndex,
)
from ferrex.core.predicates import PredicateNormalizer
from ferrex.core.procedures import (
    current_version,
    find_version,
    next_version,
    render_content,
    same_definition,
    same_name,
)
from ferrex.core.requests import (
    ForgetRequest,
    RecallRequest,
    ReflectRequest,
    StatsRequest,
    StoreRequest,
    parse,
)
from ferrex.core.retrieval import Candidate, fit_budget, order_candidates, recency_boost
from ferrex.core.staleness import STALE, Freshness, age_days, assess
from ferrex.core.sync import IndexSync, PlannedMemory

log = structlog.get_logger("ferrex.service")

PIN_NAME = "embedding_model"
PIN_DIMENSION = "embedding_dimension"
PIN_VARIANT = "embedding_variant"
PIN_SOURCE = "embedding_source"
REBUILD_PENDING = "rebuild_pending"

# Phases of the dual write where a test hook may pause the process (crash-safety tests).
PHASE_BEFORE_COMMIT = "before_sqlite_commit"
PHASE_AFTER_COMMIT = "after_sqlite_commit"
PHASE_AFTER_INDEX = "after_index_write"


class ModelMismatchError(FerrexError):
    def __init__(self, message: str) -> None:
        super().__init__(errors.MODEL_MISMATCH, message)


def _checkpoint(phase: str) -> None:
    """Test hook: with FERREX_TEST_PAUSE_AT=<phase>, announce the phase and wait to be killed."""
    target = os.environ.get("FERREX_TEST_PAUSE_AT")
    if target != phase:
        return
    marker = os.environ.get("FERREX_TEST_PAUSE_FILE")
    if marker:
        with open(marker, "w", encoding="utf-8") as handle:
            handle.write(phase)
    while True:  # pragma: no cover - the test kills the process here
        time.sleep(3600)


@dataclass
class _Prepared:
    """A validated store request with its memory built and its vectors computed."""

    request: StoreRequest
    memory: Memory
    chunks: list[Chunk]
    vectors: list[Vector]
    entity_names: list[str]
    subject_name: str | None = None
    outcome: dict[str, Any] = field(default_factory=dict)


class MemoryService:
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

    def _mismatch_message(self, pinned: str, configured: str) -> str:
        dimension = self.meta.get_meta(PIN_DIMENSION) or "?"
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
                    self.sync.rebuild()
                    self.meta.set_meta(REBUILD_PENDING, "")
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

    # ================================================================== store

    def store(self, arguments: Any) -> dict[str, Any]:
        request = parse(StoreRequest, arguments, self.settings.limits, "store")
        self.ensure_ready()
        prepared = self._prepare(request)
        results = self._commit([prepared], bulk=False)
        return results[0]

    def store_many(self, items: Sequence[Any], batch: int = 256) -> list[dict[str, Any]]:
        """Bulk ingestion through the same pipeline (one transaction and one index write per batch).

        Items that fail validation or are rejected come back as ``{"error": {...}}`` entries.
        """
        self.ensure_ready()
        out: list[dict[str, Any]] = []
        for start in range(0, len(items), batch):
            chunk = items[start : start + batch]
            prepared: list[_Prepared | dict[str, Any]] = []
            requests: list[StoreRequest] = []
            for item in chunk:
                try:
                    requests.append(parse(StoreRequest, item, self.settings.limits, "store"))
                    prepared.append({})
                except FerrexError as exc:
                    prepared.append({"error": exc.to_dict()})
            built = self._prepare_many(requests)
            cursor = 0
            for position, slot in enumerate(prepared):
                if "error" in slot:
                    continue
                item_or_error = built[cursor]
                cursor += 1
                prepared[position] = item_or_error
            ready = [p for p in prepared if isinstance(p, _Prepared)]
            committed = iter(self._commit(ready, bulk=True))
            for slot in prepared:
                out.append(next(committed) if isinstance(slot, _Prepared) else slot)
        return out

    # ------------------------------------------------------------------ preparation

    def _prepare(self, request: StoreRequest) -> _Prepared:
        built = self._prepare_many([request])[0]
        if isinstance(built, dict):
            raise FerrexError(**built["error"])
        return built

    def _prepare_many(self, requests: Sequence[StoreRequest]) -> list[_Prepared | dict[str, Any]]:
        now = self.now()
        drafts: list[_Prepared | dict[str, Any]] = []
        for request in requests:
            try:
                drafts.append(self._draft(request, now))
            except FerrexError as exc:
                drafts.append({"error": exc.to_dict()})
        texts: list[str] = []
        for draft in drafts:
            if isinstance(draft, _Prepared):
                texts.extend(chunk.text for chunk in draft.chunks)
        vectors = self.embedder.embed_documents(texts) if texts else []
        cursor = 0
        for draft in drafts:
            if isinstance(draft, _Prepared):
                draft.vectors = vectors[cursor : cursor + len(draft.chunks)]
                cursor += len(draft.chunks)
        return drafts

    def _draft(self, request: StoreRequest, now: datetime) -> _Prepared:
        namespace = request.namespace or self.namespace
        triple = [request.subject, request.predicate, request.object]
        memory_type = detect_type(
            request.type,
            has_triple_field=any(v is not None for v in triple),
            has_full_triple=all(v is not None for v in triple),
            has_procedure_fields=bool(
                request.steps or request.conditions or (request.name and request.type)
            ),
        )
        self._require_fields(request, memory_type)
        event_time = request.timestamp or now
        memory = Memory(
            id=new_memory_id(now),
            namespace=namespace,
            type=memory_type,
            created_at=now,
            updated_at=now,
            event_time=event_time,
            confidence=request.confidence,
            source=request.source,
            context=request.context,
            pinned=request.pinned,
            multi_valued=request.multi_valued,
            last_validated=None,
        )
        subject_name = None
        if memory_type is MemoryType.SEMANTIC:
            memory.subject = request.subject
            memory.predicate = request.predicate
            memory.object = request.object
            memory.t_valid = request.t_valid or request.timestamp or now
            memory.event_time = memory.t_valid
            subject_name = request.subject
        elif memory_type is MemoryType.PROCEDURAL:
            memory.name = request.name
            memory.conditions = list(request.conditions or [])
            memory.steps = list(request.steps or [])
            memory.content = request.content or render_content(
                request.name, memory.conditions, memory.steps
            )
            memory.t_valid = event_time
        else:
            memory.content = request.content
            memory.t_valid = event_time
        info = self.embedder.info
        chunks = plan_chunks(
            memory_type,
            embed_text(memory),
            steps=memory.steps,
            count_tokens=self.embedder.count_tokens,
            max_tokens=info.max_tokens,
            step_prefix=step_prefix(memory),
        )
        memory.chunk_count = len(chunks)
        memory.embed_model = info.pin
        names = list(dict.fromkeys(n.strip() for n in (request.entities or []) if n.strip()))
        if subject_name and subject_name.strip():
            # The subject resolves first: _apply_one takes resolutions[0] as the fact's subject.
            names = [subject_name.strip(), *(n for n in names if n != subject_name.strip())]
        return _Prepared(request, memory, chunks, [], names, subject_name)

    @staticmethod
    def _require_fields(request: StoreRequest, memory_type: MemoryType) -> None:
        if memory_type is MemoryType.SEMANTIC:
            missing = [n for n in ("subject", "predicate", "object") if getattr(request, n) is None]
            if missing:
                raise FerrexError(
                    errors.MISSING_FIELD,
                    f"store: a semantic memory needs subject, predicate and object (missing: "
                    f"{', '.join(missing)})",
                    field=missing[0],
                )
        elif memory_type is MemoryType.PROCEDURAL:
            if request.content is None and not request.steps and request.rollback_to is None:
                raise FerrexError(
                    errors.MISSING_FIELD,
                    "store: a procedural memory needs 'content' or 'steps' (and ideally a 'name')",
                    field="content",
                )
            if request.rollback_to is not None and not request.name:
                raise FerrexError(
                    errors.MISSING_FIELD,
                    "store: rollback_to needs the procedure 'name'",
                    field="name",
                )
        elif request.content is None:
            raise FerrexError(
                errors.MISSING_FIELD,
                "store: an episodic memory needs 'content' (or give subject, predicate and object "
                "for a semantic fact, or steps for a procedure)",
                field="content",
            )
        if request.rollback_to is not None and memory_type is not MemoryType.PROCEDURAL:
            raise FerrexError(
                errors.INVALID_PARAMS, "store: rollback_to applies to procedural memories only"
            )

    # ------------------------------------------------------------------ commit

    def _commit(self, prepared: Sequence[_Prepared], *, bulk: bool) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = []
        to_index: list[PlannedMemory] = []
        to_payload: dict[str, Memory] = {}
        namespaces: set[str] = set()
        journal: list[int] = []
        batch_vectors: list[tuple[_Prepared, Vector]] = []
        with self._write:
            now = self.now()
            with self.meta.transaction():
                for item in prepared:
                    try:
                        result = self._apply_one(item, now, batch_vectors, to_payload)
                    except FerrexError as exc:
                        if not bulk:
                            raise
                        results.append({"error": exc.to_dict()})
                        continue
                    results.append(result)
                    if result.get("status") in {"duplicate"}:
                        continue
                    namespaces.add(item.memory.namespace)
                    to_index.append(PlannedMemory(item.memory, item.chunks, item.vectors))
                    batch_vectors.append((item, item.vectors[0]))
                    journal.append(
                        self.meta.journal_add("index", item.memory.id, item.memory.namespace, now)
                    )
                for memory in to_payload.values():
                    namespaces.add(memory.namespace)
                    journal.append(
                        self.meta.journal_add("payload", memory.id, memory.namespace, now)
                    )
                _checkpoint(PHASE_BEFORE_COMMIT)
            _checkpoint(PHASE_AFTER_COMMIT)
            if to_index or to_payload:
                self.sync.write_points(to_index)
                self.sync.write_payloads(self.meta.get_memories(list(to_payload)).values())
            _checkpoint(PHASE_AFTER_INDEX)
            if journal:
                self.meta.journal_done(journal)
            for namespace in namespaces:
                self._after_write(namespace)
            self.entities.invalidate()
        if namespaces:
            self.enforce_budget()
            self.sweep_retention()
        return results

    def _apply_one(
        self,
        item: _Prepared,
        now: datetime,
        batch_vectors: list[tuple[_Prepared, Vector]],
        to_payload: dict[str, Memory],
    ) -> dict[str, Any]:
        memory = item.memory
        request = item.request
        namespace = memory.namespace
        superseded_target: Memory | None = None
        if request.supersedes is not None:
            superseded_target = self.meta.get_memory(request.supersedes)
            if superseded_target is None or superseded_target.namespace != namespace:
                raise FerrexError(
                    errors.NOT_FOUND,
                    f"store: supersedes refers to an unknown memory id '{request.supersedes}' in "
                    f"namespace '{namespace}'; find the id with recall. Nothing was stored.",
                    id=request.supersedes,
                )
        resolutions = self._resolve_entities(namespace, item.entity_names, now)
        memory.entity_ids = list(
            dict.fromkeys(r.entity_id for r in resolutions if r.entity_id is not None)
        )
        memory.entities = []
        result: dict[str, Any] = {
            "id": memory.id,
            "type": memory.type.value,
            "namespace": namespace,
        }
        invalidate: list[Memory] = []
        if superseded_target is not None:
            invalidate.append(superseded_target)
        if memory.type is MemoryType.SEMANTIC:
            subject = resolutions[0] if resolutions else None
            memory.subject_entity_id = subject.entity_id if subject else None
            fact = self._semantic(item, now, superseded_target is not None, batch_vectors)
            if fact.get("status") == "duplicate":
                self._link_duplicate_entities(fact["id"], memory.entity_ids, to_payload)
                return fact
            invalidate.extend(fact.pop("_invalidate", []))
            result.update(fact)
        elif memory.type is MemoryType.PROCEDURAL:
            result.update(
                self._procedural(
                    item, now, invalidate, batch_vectors, superseded_target is not None
                )
            )
        else:
            if superseded_target is None:
                self._dedup(item, batch_vectors)
        # ---- SQLite writes (inside the caller's transaction)
        self.meta.insert_memory(memory)
        self.meta.link_entities(memory.id, memory.entity_ids)
        for old in invalidate:
            if old.t_invalid is None:
                old_t_invalid = memory.t_valid or now
                self.meta.update_memory_fields(
                    old.id, t_invalid=old_t_invalid, superseded_by=memory.id, updated_at=now
                )
                old.t_invalid = old_t_invalid
                to_payload[old.id] = old
                self.meta.audit(
                    namespace,
                    "supersede",
                    now,
                    memory_id=old.id,
                    other_id=memory.id,
                    detail={"reason": _supersede_reason(old is superseded_target, memory, result)},
                )
        if superseded_target is not None:
            # Spec Layer 3: an explicit supersede validates the subject area it touches.
            self.meta.update_memory_fields(superseded_target.id, last_validated=now)
            result["superseded"] = sorted({*result.get("superseded", []), superseded_target.id})
        cited = _cited_memory(request.source)
        if cited is not None and cited != memory.id:
            target = self.meta.get_memory(cited)
            if target is not None and target.namespace == namespace:
                self.meta.update_memory_fields(cited, last_validated=now)
                self.meta.audit(
                    namespace,
                    "validate",
                    now,
                    memory_id=cited,
                    other_id=memory.id,
                    detail={"reason": "cited as source"},
                )
                result["validated"] = [cited]
        self.meta.audit(
            namespace, "store", now, memory_id=memory.id, detail={"type": memory.type.value}
        )
        result.setdefault("status", "stored")
        names = [r for r in resolutions if r.entity_id is not None]
        if names:
            result["entities"] = [
                {"name": r.name, "entity_id": r.entity_id, "resolved_by": r.method} for r in names
            ]
        if memory.chunk_count > 1:
            result["chunks"] = memory.chunk_count
        if memory.pinned:
            result["pinned"] = True
        return result

    def _link_duplicate_entities(
        self, existing_id: str, entity_ids: Sequence[int], to_payload: dict[str, Memory]
    ) -> None:
        """Entities named with a duplicate fact belong to the fact that is kept (never orphans)."""
        existing = self.meta.get_memory(existing_id)
        if existing is None:
            return
        added = [e for e in entity_ids if e not in existing.entity_ids]
        if added:
            self.meta.link_entities(existing_id, added)
            to_payload[existing_id] = existing

    def _resolve_entities(
        self, namespace: str, names: Sequence[str], now: datetime
    ) -> list[EntityResolution]:
        return [self.entities.resolve(namespace, name, create=True, at=now) for name in names]

    def _dedup(
        self,
        item: _Prepared,
        batch_vectors: Sequence[tuple[_Prepared, Vector]],
        exclude: frozenset[str] = frozenset(),
    ) -> None:
        """Reject a near-duplicate of a same-type memory of the namespace (``exclude``: ids that
        may legitimately be close, e.g. the earlier versions of the procedure being updated)."""
        memory = item.memory
        vector = item.vectors[0]
        flt = IndexFilter(
            namespace=memory.namespace, types=(memory.type.value,), model=self.embedder.info.pin
        )
        hits = [
            hit
            for hit in self.index.dense_search(
                vector, flt, 3 + len(exclude), self.settings.retrieval.hnsw_ef
            )
            if hit.memory_id not in exclude
        ]
        for other, other_vector in batch_vectors:
            if (
                other.memory.namespace == memory.namespace
                and other.memory.type is memory.type
                and other.memory.id not in exclude
            ):
                score = float(np.dot(vector, other_vector))
                hits.append(IndexHit(point_id="", memory_id=other.memory.id, score=score))
        duplicate = find_duplicate(hits, self.settings.dedup.threshold)
        if duplicate is not None:
            raise FerrexError(
                errors.DUPLICATE,
                f"similar memory already exists: {duplicate.memory_id} (cosine "
                f"{duplicate.similarity:.3f}). Nothing was stored; to replace it, store again with "
                f'supersedes="{duplicate.memory_id}".',
                existing_id=duplicate.memory_id,
                similarity=duplicate.similarity,
            )

    def _object_cosine(self, a: str, b: str) -> float:
        va, vb = self.embedder.embed_documents([a, b])
        return float(np.dot(va, vb))

    def _multi_valued(self, namespace: str, request: StoreRequest, canonical: str) -> bool:
        if request.multi_valued:
            return True
        normalizer = self.normalizer(namespace)
        configured = {
            normalizer.canonical(p) for p in self.settings.conflict.multi_valued(namespace)
        }
        return canonical in configured

    def _semantic(
        self,
        item: _Prepared,
        now: datetime,
        explicit_supersede: bool,
        batch_vectors: Sequence[tuple[_Prepared, Vector]],
    ) -> dict[str, Any]:
        memory = item.memory
        request = item.request
        namespace = memory.namespace
        normalizer = self.normalizer(namespace)
        existing_predicates: list[str] = []
        if memory.subject_entity_id is not None:
            existing_predicates = self.meta.predicates_of_subject(
                namespace, memory.subject_entity_id
            )
        resolution = normalizer.resolve(request.predicate or "", existing_predicates)
        memory.predicate_canonical = resolution.canonical
        out: dict[str, Any] = {
            "predicate": {"canonical": resolution.canonical, "resolved_by": resolution.method}
        }
        if explicit_supersede:
            out["status"] = "superseded"
            return out
        current: list[Memory] = []
        if memory.subject_entity_id is not None:
            current = [
                f
                for f in self.meta.facts_for_predicate(
                    namespace, memory.subject_entity_id, resolution.canonical
                )
                if f.t_invalid is None
            ]
        # A (subject, predicate) already tagged multi-valued keeps collecting values.
        multi = self._multi_valued(namespace, request, resolution.canonical) or any(
            f.multi_valued for f in current
        )
        decision = conflicts.decide(
            incoming_object=memory.object or "",
            incoming_confidence=memory.confidence,
            incoming_t_valid=memory.t_valid or now,
            current=current,
            multi_valued=multi,
            duplicate_threshold=self.settings.conflict.duplicate_threshold,
            different_threshold=self.settings.conflict.different_threshold,
            embedding_duplicate_threshold=self.settings.conflict.object_embedding_threshold,
            embedding_cosine=self._object_cosine,
        )
        similarity = (
            None
            if decision.similarity is None
            else {
                "score": round(decision.similarity.score, 4),
                "method": decision.similarity.method,
            }
        )
        if decision.outcome is conflicts.Outcome.NEW:
            self._dedup(item, batch_vectors)
            return out
        if decision.outcome is conflicts.Outcome.DUPLICATE:
            existing = decision.duplicate_of
            assert existing is not None
            updates: dict[str, Any] = {"last_validated": now, "updated_at": now}
            if memory.confidence > existing.confidence:
                updates["confidence"] = memory.confidence
            self.meta.update_memory_fields(existing.id, **updates)
            self.meta.audit(
                namespace,
                "duplicate",
                now,
                memory_id=existing.id,
                detail={"incoming_object": memory.object, "similarity": similarity},
            )
            return {
                "id": existing.id,
                "type": "semantic",
                "namespace": namespace,
                "status": "duplicate",
                "duplicate_of": existing.id,
                "similarity": similarity,
                "confidence": max(existing.confidence, memory.confidence),
                "message": "this fact is already known; it was confirmed (last_validated updated) "
                "instead of stored twice",
            }
        out["similarity"] = similarity
        if decision.outcome is conflicts.Outcome.MULTI_VALUED:
            memory.multi_valued = True
            out["status"] = "stored"
            out["multi_valued"] = True
            out["also_current"] = [f.id for f in current]
            for fact in current:
                if not fact.multi_valued:
                    self.meta.update_memory_fields(fact.id, multi_valued=True)
            self.meta.audit(
                namespace,
                "multi_valued",
                now,
                memory_id=memory.id,
                detail={"also_current": out["also_current"], "predicate": resolution.canonical},
            )
            return out
        if decision.outcome is conflicts.Outcome.HISTORICAL:
            memory.t_invalid = decision.new_t_invalid
            keeper = decision.superseded_by_existing
            memory.superseded_by = keeper.id if keeper else None
            out["status"] = "historical"
            out["superseded_by"] = memory.superseded_by
            out["message"] = "a newer value is already current; this fact was stored as history"
            self.meta.audit(
                namespace, "historical", now, memory_id=memory.id, other_id=memory.superseded_by
            )
            return out
        if decision.outcome is conflicts.Outcome.CONTRADICTION:
            out["status"] = "contradiction"
            out["contradicts"] = [f.id for f in decision.contradicts]
            out["message"] = (
                "a current fact with higher confidence says otherwise; both are kept and flagged. "
                "Resolve with store(supersedes=...) or forget."
            )
            self.meta.audit(
                namespace,
                "contradiction",
                now,
                memory_id=memory.id,
                detail={"contradicts": out["contradicts"]},
            )
            return out
        out["status"] = "superseded"
        out["superseded"] = [f.id for f in decision.invalidate]
        out["_invalidate"] = list(decision.invalidate)
        return out

    def _procedural(
        self,
        item: _Prepared,
        now: datetime,
        invalidate: list[Memory],
        batch_vectors: Sequence[tuple[_Prepared, Vector]],
        explicit_supersede: bool,
    ) -> dict[str, Any]:
        memory = item.memory
        request = item.request
        out: dict[str, Any] = {}
        if not memory.name:
            if not explicit_supersede:
                self._dedup(item, batch_vectors)
            return out
        versions = self._procedure_versions(memory.namespace, memory.name)
        current = current_version(versions)
        if request.rollback_to is not None:
            target = find_version(versions, request.rollback_to)
            if target is None:
                raise FerrexError(
                    errors.NOT_FOUND,
                    f"store: procedure '{memory.name}' has no version {request.rollback_to} "
                    f"(versions: {[v.version for v in versions] or 'none'})",
                )
            memory.content = target.content
            memory.conditions = list(target.conditions)
            memory.steps = list(target.steps)
            vectors = self.sync.plan([memory])[0]
            item.chunks = vectors.chunks
            item.vectors = vectors.vectors
            memory.chunk_count = len(item.chunks)
            out["rolled_back_to"] = request.rollback_to
        elif not explicit_supersede:
            # A changed version of a known procedure is an update, not a near-duplicate of its
            # own earlier versions; an unchanged one is a duplicate of the current version.
            if current is not None and same_definition(current, memory):
                raise FerrexError(
                    errors.DUPLICATE,
                    f"similar memory already exists: {current.id} (procedure '{current.name}' "
                    f"version {current.version} has exactly these steps). Nothing was stored.",
                    existing_id=current.id,
                    similarity=1.0,
                )
            self._dedup(item, batch_vectors, exclude=frozenset(v.id for v in versions))
        memory.version = next_version(versions)
        out["version"] = memory.version
        if current is not None:
            invalidate.append(current)
            out["previous_version"] = {"id": current.id, "version": current.version}
        if memory.version > 1:
            self.meta.audit(
                memory.namespace,
                "version",
                now,
                memory_id=memory.id,
                other_id=current.id if current else None,
                detail={"version": memory.version},
            )
        return out

    def _procedure_versions(self, namespace: str, name: str) -> list[Memory]:
        """Every version of the named procedure (names compare case- and spacing-insensitively)."""
        rows = self.meta.memories_in_namespace(
            namespace, where="type = 'procedural' AND name IS NOT NULL", order="version, id"
        )
        return [m for m in rows if same_name(m.name, name)]

    # ================================================================== recall

    def recall(self, arguments: Any) -> dict[str, Any]:
        request = parse(RecallRequest, arguments, self.settings.limits, "recall")
        cfg = self.settings.retrieval
        limit = request.limit or cfg.default_limit
        if limit > cfg.max_limit:
            raise FerrexError(
                errors.TOO_LARGE,
                f"recall: limit is at most {cfg.max_limit} (got {limit})",
                field="limit",
            )
        self.ensure_ready()
        self._sync_external_writes()
        namespace = request.namespace or self.namespace
        now = self.now()

        unresolved: list[str] = []
        entity_ids: tuple[int, ...] | None = None
        if request.entities:
            resolved: list[int] = []
            for name in request.entities:
                resolution = self.entities.resolve(namespace, name, create=False, at=now)
                if resolution.entity_id is None:
                    unresolved.append(name)
                else:
                    resolved.append(resolution.entity_id)
            entity_ids = tuple(sorted(set(resolved)))
        types = tuple(request.types or ())
        validity = "all" if request.include_invalidated or request.version else "current"
        if request.version is not None:
            types = ("procedural",)
        flt = IndexFilter(
            model=self.embedder.info.pin,
            namespace=namespace,
            types=types,
            entity_ids=entity_ids,
            time_after=request.time_range.after if request.time_range else None,
            time_before=request.time_range.before if request.time_range else None,
            validity=validity,  # type: ignore[arg-type]
            as_of=request.as_of,
        )
        vector = self._query_vector(request.query)
        prefetch = max(cfg.prefetch_limit, 2 * limit)
        params = (
            # The exact text too: the cross-encoder scores (cached with the candidates) see the
            # raw query, which an uncased embedding of two spellings would not tell apart.
            request.query,
            types,
            entity_ids,
            flt.time_after,
            flt.time_before,
            validity,
            request.as_of,
            request.explain,
            prefetch,
            request.version,
        )
        key = self.cache.key(namespace, embedding_hash(vector), params)
        cached = self.cache.get(key)
        cache_hit = cached is not None
        if cached is None:
            cached = self._retrieve(request.query, vector, flt, prefetch, request.explain)
            self.cache.put(key, cached)

        rows = self.meta.get_memories([entry[0] for entry in cached.fused])
        candidates: list[Candidate] = []
        freshness: dict[str, Freshness] = {}
        held_back = 0
        for rank, (memory_id, score, dense_rank, bm25_rank) in enumerate(cached.fused, start=1):
            memory = rows.get(memory_id)
            if memory is None or memory.namespace != namespace:
                continue  # a row deleted mid-flight, or (never) another namespace
            if request.version is not None and memory.version != request.version:
                continue
            fresh = assess(memory, now, self.settings.staleness)
            if fresh.staleness == STALE and not request.include_stale:
                held_back += 1
                continue
            freshness[memory_id] = fresh
            candidates.append(Candidate(memory_id, score, rank, dense_rank, bm25_rank))

        use_rerank = self.reranker.available and cfg.rerank_top_n > 0 and bool(candidates)
        if self.settings.rerank and not self.reranker.available:
            self.reranker.load()
            use_rerank = self.reranker.available and cfg.rerank_top_n > 0 and bool(candidates)

        def rerank(head: Sequence[Candidate]) -> list[float]:
            missing = [c for c in head if c.memory_id not in cached.rerank_scores]
            if missing:
                scores = self.reranker.score(
                    request.query, [rows[c.memory_id].display_text() for c in missing]
                )
                for candidate, score in zip(missing, scores, strict=True):
                    cached.rerank_scores[candidate.memory_id] = score
            return [cached.rerank_scores[c.memory_id] for c in head]

        def boost(candidate: Candidate) -> float:
            memory = rows[candidate.memory_id]
            return recency_boost(memory.type, age_days(memory, now), self.settings.recency)

        ordered, basis = order_candidates(
            candidates,
            rerank_top_n=cfg.rerank_top_n,
            rerank=rerank if use_rerank else None,
            boost_of=boost,
            base_k=cfg.fused_base_k,
        )
        selected = ordered[:limit]
        truncated = 0
        tokens_used = None
        if request.max_tokens is not None:
            texts = [rows[c.memory_id].display_text() for c in selected]
            keep = fit_budget(texts, self._count_budget_tokens, request.max_tokens)
            truncated = len(selected) - keep
            selected = selected[:keep]
            tokens_used = sum(self._count_budget_tokens(t) for t in texts[:keep])
        results = [
            self._result(rows[c.memory_id], c, freshness[c.memory_id], request.explain)
            for c in selected
        ]
        self._flag_contradictions(namespace, [rows[c.memory_id] for c in selected], results)
        self.access.record([c.memory_id for c in selected])
        response: dict[str, Any] = {
            "results": results,
            "count": len(results),
            "namespace": namespace,
            "reranked": basis == "rerank",
            "score_basis": basis,
            "stale_held_back": held_back,
        }
        if not response["reranked"]:
            response["rerank_status"] = self.reranker.unavailable_reason or (
                "no candidates" if not candidates else "reranking disabled"
            )
        if held_back:
            response["note"] = (
                f"{held_back} stale memor{'y was' if held_back == 1 else 'ies were'} held back; "
                "call recall with include_stale=true to see them"
            )
        if request.max_tokens is not None:
            response["truncated"] = truncated
            response["tokens"] = tokens_used
        if unresolved:
            response["unresolved_entities"] = unresolved
        if request.explain:
            response["cache_hit"] = cache_hit
        return response

    def _query_vector(self, query: str) -> Vector:
        key = (self.embedder.info.pin, query)
        vector = self.cache.queries.get(key)
        if vector is None:
            vector = self.embedder.embed_query(query)
            self.cache.queries.put(key, vector)
        return vector

    def _count_budget_tokens(self, text: str) -> int:
        counter: Callable[[str], int] = getattr(
            self.embedder, "count_text_tokens", self.embedder.count_tokens
        )
        return counter(text)

    def _retrieve(
        self, query: str, vector: Vector, flt: IndexFilter, prefetch: int, explain: bool
    ) -> CachedRecall:
        cfg = self.settings.retrieval
        sparse = self.sparse.encode_query(query)
        if cfg.mode == "dense":
            hits = _as_rrf(self.index.dense_search(vector, flt, prefetch, cfg.hnsw_ef), cfg.rrf_k)
        elif cfg.mode == "bm25":
            hits = _as_rrf(self.index.sparse_search(sparse, flt, prefetch), cfg.rrf_k)
        else:
            hits = self.index.hybrid(
                vector, sparse, flt, prefetch, 2 * prefetch, cfg.rrf_k, cfg.hnsw_ef
            )
        dense_ranks: dict[str, int] = {}
        bm25_ranks: dict[str, int] = {}
        if explain:
            dense_ranks = _ranks(self.index.dense_search(vector, flt, prefetch, cfg.hnsw_ef))
            bm25_ranks = _ranks(self.index.sparse_search(sparse, flt, prefetch))
        best: dict[str, float] = {}
        for hit in hits:
            if hit.memory_id and hit.score > best.get(hit.memory_id, float("-inf")):
                best[hit.memory_id] = hit.score
        ordered = sorted(best.items(), key=lambda item: (-item[1], item[0]))
        return CachedRecall(
            fused=[
                (mid, score, dense_ranks.get(mid), bm25_ranks.get(mid)) for mid, score in ordered
            ]
        )

    def _result(
        self, memory: Memory, candidate: Candidate, fresh: Freshness, explain: bool
    ) -> dict[str, Any]:
        item: dict[str, Any] = {"id": memory.id, "type": memory.type.value}
        if memory.type is MemoryType.SEMANTIC:
            item.update(subject=memory.subject, predicate=memory.predicate, object=memory.object)
            item["confidence"] = memory.confidence
            item["t_valid"] = to_iso(memory.t_valid) if memory.t_valid else None
            if memory.t_invalid is not None:
                item["t_invalid"] = to_iso(memory.t_invalid)
                item["superseded_by"] = memory.superseded_by
            if memory.multi_valued:
                item["multi_valued"] = True
        elif memory.type is MemoryType.PROCEDURAL:
            if memory.name:
                item["name"] = memory.name
            item["content"] = memory.content
            if memory.conditions:
                item["conditions"] = memory.conditions
            if memory.steps:
                item["steps"] = memory.steps
            if memory.version is not None:
                item["version"] = memory.version
            if memory.t_invalid is not None:
                item["t_invalid"] = to_iso(memory.t_invalid)
                item["superseded_by"] = memory.superseded_by
        else:
            item["content"] = memory.content
            item["timestamp"] = to_iso(memory.event_time)
        item["score"] = round(candidate.final_score, 6)
        item["age_days"] = fresh.age_days
        item["entities"] = memory.entities
        item["created_at"] = to_iso(memory.created_at)
        item["freshness"] = fresh.to_dict()
        if memory.source:
            item["source"] = memory.source
        if memory.context:
            item["context"] = memory.context
        if memory.pinned:
            item["pinned"] = True
        if explain:
            item["explain"] = candidate.explain()
        return item

    def _flag_contradictions(
        self, namespace: str, memories: Sequence[Memory], results: list[dict[str, Any]]
    ) -> None:
        """Layer 4: current single-valued facts sharing subject+predicate with other objects."""
        by_id = {r["id"]: r for r in results}
        seen: dict[tuple[int, str], list[Memory]] = {}
        for memory in memories:
            if (
                memory.type is not MemoryType.SEMANTIC
                or memory.t_invalid is not None
                or memory.multi_valued
                or memory.subject_entity_id is None
                or memory.predicate_canonical is None
            ):
                continue
            group_key = (memory.subject_entity_id, memory.predicate_canonical)
            if group_key not in seen:
                seen[group_key] = [
                    f
                    for f in self.meta.facts_for_predicate(namespace, *group_key)
                    if f.t_invalid is None and not f.multi_valued
                ]
            group = seen[group_key]
            others = [
                f.id
                for f in group
                if f.id != memory.id
                and conflicts.normalize_object(f.object or "")
                != conflicts.normalize_object(memory.object or "")
            ]
            if others:
                by_id[memory.id]["contradiction"] = True
                by_id[memory.id]["contradicts"] = sorted(others)

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
            removed = self._delete(
                deleted, namespace, cascade=request.cascade, action="forget", reason="forget"
            )
        return {
            "deleted": deleted,
            "not_found": not_found,
            "entities_removed": removed,
            "namespace": namespace,
        }

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

    def sweep_retention(self, *, force: bool = False) -> int:
        """Evict superseded facts past the retention window (runs even under budget)."""
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
                    where="type = 'semantic' AND t_invalid IS NOT NULL AND pinned = 0",
                    order="t_invalid, id",
                )
                expired = [m.id for m in old if superseded_past_retention(m, now, retention)]
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
        return self.meta.size_bytes() + self.index.size_bytes()

    def enforce_budget(self) -> int:
        """Evict in the spec's priority order while the storage budget is exceeded."""
        lifecycle = self.settings.lifecycle
        if lifecycle.max_memories <= 0 and lifecycle.max_storage_mb <= 0:
            return 0
        total = self.meta.count_memories()
        size = self.storage_bytes()
        excess_memories = (
            max(0, total - lifecycle.max_memories) if lifecycle.max_memories > 0 else 0
        )
        budget_bytes = lifecycle.max_storage_mb * 1024 * 1024
        excess_bytes = max(0.0, size - budget_bytes) if lifecycle.max_storage_mb > 0 else 0.0
        if excess_memories <= 0 and excess_bytes <= 0:
            return 0
        now = self.now()
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
            ranked = eviction_candidates(
                levels,
                now=now,
                retention_days=lifecycle.superseded_retention_days,
                cited=cited,
                episodic_half_life_days=lifecycle.episodic_half_life_days,
            )
            chosen = choose_evictions(
                ranked,
                excess_memories=excess_memories,
                excess_bytes=excess_bytes,
                bytes_per_memory=size / max(1, total),
            )
            by_namespace: dict[str, list[tuple[str, str]]] = {}
            for candidate in chosen:
                by_namespace.setdefault(candidate.memory.namespace, []).append(
                    (candidate.memory.id, candidate.reason)
                )
            for namespace, items in by_namespace.items():
                for memory_id, reason in items:
                    self._delete(
                        [memory_id], namespace, cascade=False, action="evict", reason=reason
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
        self._sync_external_writes()
        return stats(self, request)

    def warnings(self, *, brief: bool = False) -> list[str]:
        """What the agent must know about degraded operation (never hidden, spec principle 5)."""
        out: list[str] = []
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


def _as_rrf(hits: Sequence[IndexHit], rrf_k: int) -> list[IndexHit]:
    """Single-channel results scored like one RRF channel (1 / (k + rank)), for mode parity."""
    out: list[IndexHit] = []
    seen: set[str] = set()
    for hit in hits:
        if hit.memory_id in seen:
            continue
        seen.add(hit.memory_id)
        out.append(IndexHit(hit.point_id, hit.memory_id, 1.0 / (rrf_k + len(out) + 1), hit.chunk))
    return out


def _ranks(hits: Sequence[IndexHit]) -> dict[str, int]:
    ranks: dict[str, int] = {}
    for hit in hits:
        if hit.memory_id and hit.memory_id not in ranks:
            ranks[hit.memory_id] = len(ranks) + 1
    return ranks


def _supersede_reason(explicit: bool, memory: Memory, result: dict[str, Any]) -> str:
    """Why an old memory was invalidated (audit log)."""
    if explicit:
        return "explicit"
    if memory.type is MemoryType.PROCEDURAL:
        return f"new version {memory.version}"
    return str(result.get("status") or "superseded")


def _cited_memory(source: str | None) -> str | None:
    """``memory:<id>`` (or ``episodic:<id>`` etc.) names a memory this one was derived from."""
    if not source or ":" not in source:
        return None
    scheme, _, rest = source.partition(":")
    if scheme in {"memory", "episodic", "semantic", "procedural"} and rest:
        return rest.strip()
    return None
