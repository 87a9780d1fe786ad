"""Ingestion (spec, store steps 1-8): type resolution, dedup, chunking, embedding, entity
resolution, conflict detection, procedure versions, and the dual write of the result."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from typing import Any

import numpy as np
import structlog

from ferrex.core import conflict as conflicts
from ferrex.core import errors
from ferrex.core.call_keys import record, recorded
from ferrex.core.chunking import Chunk, plan_chunks, step_prefix
from ferrex.core.clock import to_iso
from ferrex.core.dedup import Duplicate, find_duplicate
from ferrex.core.deps import Deps
from ferrex.core.entities import EntityResolution, display_name, same_entity_name
from ferrex.core.errors import FerrexError
from ferrex.core.ids import new_memory_id
from ferrex.core.memory import Memory, MemoryType, detect_type, embed_text
from ferrex.core.ports import (
    IndexFilter,
    IndexHit,
    Vector,
)
from ferrex.core.predicates import PredicateResolution
from ferrex.core.procedures import (
    current_version,
    find_version,
    next_version,
    render_content,
    same_definition,
    same_name,
)
from ferrex.core.requests import StoreRequest
from ferrex.core.results import EntityLink, Outcome, PossibleAlias, StoreOutcome
from ferrex.core.secrets import Redaction, SecretScanner, screen_store
from ferrex.core.sync import (
    PHASE_AFTER_COMMIT,
    PHASE_AFTER_INDEX,
    PHASE_BEFORE_COMMIT,
    PlannedMemory,
)
from ferrex.core.sync import checkpoint as _checkpoint
from ferrex.core.upkeep import Upkeep

log = structlog.get_logger("ferrex.ingest")


@dataclass
class _Prepared:
    """A validated store request with its memory built and its vectors computed."""

    request: StoreRequest
    memory: Memory
    chunks: list[Chunk]
    vectors: list[Vector]
    entity_names: list[str]
    subject_name: str | None = None
    # Name embeddings computed with the document's batch (before the write transaction), for
    # the names no exact or fuzzy match resolves: no model runs inside a transaction.
    name_vectors: dict[str, Vector] = field(default_factory=dict)
    # Per chunk: late-interaction token vectors (empty: the index has no such channel).
    tokens: list[np.ndarray | None] = field(default_factory=list)
    # The index's nearest same-type memories (``Store._dedup_search``), searched for a whole
    # bulk batch in one engine call before its transaction (the index does not change until
    # the batch is committed); None: searched when checked.
    nearest: list[IndexHit] | None = None
    # Secrets taken out of the request before any rule saw it (core/secrets.py).
    redactions: list[Redaction] = field(default_factory=list)


@dataclass
class _Fact:
    """How a semantic store resolved against its subject's facts."""

    answer: StoreOutcome | None = None  # names an existing memory: nothing new is written
    invalidate: list[Memory] = field(default_factory=list)
    end: tuple[Memory, datetime] | None = None  # a current fact said to have ended


class Store:
    """The store use case (and its bulk form, for import and benchmarks)."""

    def __init__(self, deps: Deps, upkeep: Upkeep) -> None:
        self.deps = deps
        self.upkeep = upkeep
        self.settings = deps.settings
        self.meta = deps.meta
        self.index = deps.index
        self.embedder = deps.embedder
        self.sync = deps.sync
        self.entities = deps.entities
        self.normalizer = deps.normalizer
        self.now = deps.now
        secrets = self.settings.secrets
        self.scanner = SecretScanner(secrets.patterns, secrets.allow)

    def run(self, request: StoreRequest, key: str | None = None) -> StoreOutcome:
        """One store; ``key``: a forwarded call's idempotency key (``core/call_keys.py``)."""
        first = recorded(self.meta, key, StoreOutcome)
        if first is not None:
            return first  # applied before its engine died: the first answer, nothing again
        prepared = self._prepare(request)
        result = self._commit([prepared], bulk=False, key=key)[0]
        assert isinstance(result, StoreOutcome)  # bulk=False raises instead
        return result

    def run_many(
        self, items: Sequence[StoreRequest | FerrexError], batch: int = 256
    ) -> list[StoreOutcome | FerrexError]:
        """Bulk ingestion through the same pipeline (one transaction and one index write per
        batch). ``items``: parsed requests, or the error parsing one gave (passed through).
        Items rejected come back as their ``FerrexError``."""
        out: list[StoreOutcome | FerrexError] = []
        for start in range(0, len(items), batch):
            chunk = items[start : start + batch]
            requests = [item for item in chunk if isinstance(item, StoreRequest)]
            built = iter(self._prepare_many(requests))
            prepared: list[_Prepared | FerrexError] = [
                next(built) if isinstance(item, StoreRequest) else item for item in chunk
            ]
            ready = [p for p in prepared if isinstance(p, _Prepared)]
            # The budget is enforced once, after the last batch: never on this call's writes.
            committed = iter(self._commit(ready, bulk=True, evict=False))
            for slot in prepared:
                out.append(next(committed) if isinstance(slot, _Prepared) else slot)
        self._evict_after_store(out)
        return out

    # ------------------------------------------------------------------ preparation

    def _prepare(self, request: StoreRequest) -> _Prepared:
        built = self._prepare_many([request])[0]
        if isinstance(built, FerrexError):
            raise built
        return built

    def _prepare_many(self, requests: Sequence[StoreRequest]) -> list[_Prepared | FerrexError]:
        now = self.now()
        drafts: list[_Prepared | FerrexError] = []
        for request in requests:
            try:
                drafts.append(self._draft(request, now))
            except FerrexError as exc:
                drafts.append(exc)
        texts: list[str] = []
        names: dict[str, list[_Prepared]] = {}
        for draft in drafts:
            if isinstance(draft, _Prepared):
                texts.extend(chunk.text for chunk in draft.chunks)
                for name in self.entities.names_to_embed(
                    draft.memory.namespace, draft.entity_names
                ):
                    names.setdefault(name, []).append(draft)
        # One model call for the documents and the entity names they introduce.
        wanted = [*texts, *names]
        vectors, tokens = self.sync.embed(wanted, documents=len(texts))
        cursor = 0
        for draft in drafts:
            if isinstance(draft, _Prepared):
                draft.vectors = vectors[cursor : cursor + len(draft.chunks)]
                draft.tokens = tokens[cursor : cursor + len(draft.chunks)]
                cursor += len(draft.chunks)
        for name, owners in names.items():
            for owner in owners:
                owner.name_vectors[name] = vectors[cursor]
            cursor += 1
        return drafts

    def _draft(self, request: StoreRequest, now: datetime) -> _Prepared:
        # Secrets first: dedup, conflicts, entities and the model see the redacted text only.
        request, redactions = screen_store(request, self.scanner, self.settings.secret_handling)
        namespace = request.namespace or self.deps.namespace
        triple = [request.subject, request.predicate, request.object]
        memory_type = detect_type(
            request.type,
            has_triple_field=any(v is not None for v in triple),
            has_full_triple=all(v is not None for v in triple),
            has_procedure_fields=bool(
                request.steps
                or request.conditions
                or (request.name and request.type)
                or request.rollback_to is not None
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
            _fill_fact(memory, request, now)
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
        return _Prepared(request, memory, chunks, [], names, subject_name, redactions=redactions)

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
            given = [
                n for n in ("content", "steps", "conditions") if getattr(request, n) is not None
            ]
            if request.rollback_to is not None and given:
                raise FerrexError(
                    errors.INVALID_PARAMS,
                    f"store: rollback_to restores version {request.rollback_to} as it was, so "
                    f"'{given[0]}' cannot be given with it: either roll back (name + rollback_to) "
                    "or store a new version (name + steps). Nothing was stored.",
                    field=given[0],
                )
        elif request.content is None:
            given = [n for n in ("subject", "predicate", "object") if getattr(request, n)]
            if given and request.type is None:  # a fact with a part missing, not an episode
                missing = [n for n in ("subject", "predicate", "object") if n not in given]
                raise FerrexError(
                    errors.MISSING_FIELD,
                    f"store: a semantic fact needs subject, predicate and object (missing: "
                    f"{', '.join(missing)})",
                    field=missing[0],
                )
            raise FerrexError(
                errors.MISSING_FIELD,
                "store: an episodic memory needs 'content' (or give subject, predicate and object "
                "for a semantic fact, or steps for a procedure)",
                field="content",
            )
        if request.rollback_to is not None and memory_type is not MemoryType.PROCEDURAL:
            raise FerrexError(
                errors.INVALID_PARAMS,
                "store: rollback_to applies to procedural memories only (give type "
                "'procedural' and the procedure's name)",
                field="rollback_to",
            )

    # ------------------------------------------------------------------ commit

    def _commit(
        self,
        prepared: Sequence[_Prepared],
        *,
        bulk: bool,
        evict: bool = True,
        key: str | None = None,
    ) -> list[StoreOutcome | FerrexError]:
        results: list[StoreOutcome | FerrexError] = []
        to_index: list[PlannedMemory] = []
        to_payload: dict[str, Memory] = {}
        namespaces: set[str] = set()
        journal: list[int] = []
        batch_vectors: list[tuple[_Prepared, Vector]] = []
        with self.deps.write:
            # Another connection's writes (an operator command) drop the caches, the
            # resolver's tables among them, before this one relies on them.
            self.deps.sync_external_writes()
            first = recorded(self.meta, key, StoreOutcome)
            if first is not None:  # the same call, applied meanwhile
                return [first]
            now = self.now()
            if bulk:
                self._search_nearest(prepared)
            try:
                with self.meta.transaction():
                    for item in prepared:
                        try:
                            # A rejected item leaves nothing behind (entities it created included).
                            with self.meta.savepoint():
                                result = self._apply_one(item, now, batch_vectors, to_payload)
                        except FerrexError as exc:
                            # Its savepoint took back the entities it created: so must the
                            # resolver's tables.
                            self.entities.invalidate(item.memory.namespace)
                            if not bulk:
                                raise
                            results.append(exc)
                            continue
                        result.redacted = list(item.redactions)
                        results.append(result)
                        if result.status in {Outcome.DUPLICATE, Outcome.ENDED}:
                            continue
                        namespaces.add(item.memory.namespace)
                        to_index.append(
                            PlannedMemory(item.memory, item.chunks, item.vectors, item.tokens)
                        )
                        batch_vectors.append((item, item.vectors[0]))
                        journal.append(
                            self.meta.journal_add(
                                "index", item.memory.id, item.memory.namespace, now
                            )
                        )
                    for memory in to_payload.values():
                        namespaces.add(memory.namespace)
                        journal.append(
                            self.meta.journal_add("payload", memory.id, memory.namespace, now)
                        )
                    if key is not None and isinstance(results[0], StoreOutcome):
                        record(self.meta, key, "store", results[0].namespace, results[0])
                    _checkpoint(PHASE_BEFORE_COMMIT)
            except BaseException:
                # Rolled back: what the resolver learned in it is gone from the store too.
                for namespace in {item.memory.namespace for item in prepared}:
                    self.entities.invalidate(namespace)
                raise
            _checkpoint(PHASE_AFTER_COMMIT)
            if to_index or to_payload:
                self.sync.write_points(to_index)
                self.sync.write_payloads(self.meta.get_memories(list(to_payload)).values())
            _checkpoint(PHASE_AFTER_INDEX)
            if journal:
                self.meta.journal_done(journal)
            for namespace in namespaces:
                self.deps.after_write(namespace)
        if namespaces and evict:
            self._evict_after_store(results)
        return results

    def _evict_after_store(self, results: Sequence[StoreOutcome | FerrexError]) -> None:
        """The storage budget and the retention sweep after a store. Never evicts a memory the
        answers name (what the call wrote, superseded, confirmed or flagged), so an answer never
        names a memory that is already gone; says how many others went (``evicted``, on the
        last stored answer)."""
        stored = [r for r in results if isinstance(r, StoreOutcome)]
        if not stored:
            return
        named = {memory_id for r in stored for memory_id in r.named_ids()}
        evicted = self.upkeep.enforce_budget(exclude=named)
        evicted += self.upkeep.sweep_retention(exclude=named)
        if evicted:
            stored[-1].evicted = evicted

    def _apply_one(
        self,
        item: _Prepared,
        now: datetime,
        batch_vectors: list[tuple[_Prepared, Vector]],
        to_payload: dict[str, Memory],
    ) -> StoreOutcome:
        memory = item.memory
        request = item.request
        namespace = memory.namespace
        superseded_target = self._supersede_target(memory, request.supersedes)
        resolutions = self._resolve_entities(namespace, item.entity_names, now, item.name_vectors)
        memory.entity_ids = list(
            dict.fromkeys(r.entity_id for r in resolutions if r.entity_id is not None)
        )
        memory.entities = []
        result = StoreOutcome(memory.id, memory.type, namespace)
        invalidate: list[Memory] = []
        if superseded_target is not None:
            invalidate.append(superseded_target)
        if memory.type is MemoryType.SEMANTIC:
            subject = resolutions[0] if resolutions else None
            memory.subject_entity_id = subject.entity_id if subject else None
            fact = self._semantic(item, now, superseded_target is not None, batch_vectors, result)
            if fact.end is not None:
                ended, until = fact.end
                self._close_interval(
                    ended, until, now, to_payload, "ended", {"t_invalid": to_iso(until)}
                )
                self.meta.update_memory_fields(ended.id, last_validated=now)
            if fact.answer is not None:
                if fact.answer.status is Outcome.DUPLICATE:
                    self._link_duplicate_entities(fact.answer.id, memory.entity_ids, to_payload)
                return fact.answer
            invalidate.extend(fact.invalidate)
        elif memory.type is MemoryType.PROCEDURAL:
            self._procedural(
                item, now, invalidate, batch_vectors, superseded_target is not None, result
            )
        else:
            if superseded_target is None:
                self._dedup(item, batch_vectors)
        # ---- SQLite writes (inside the caller's transaction)
        self.meta.insert_memory(memory)
        self.meta.link_entities(memory.id, memory.entity_ids)
        for old in invalidate:
            if old.t_invalid is None:
                # Never before the old memory's own start: a backdated replacement closes the
                # old interval where it began (empty), never into an inverted one.
                self._close_interval(
                    old,
                    max(memory.t_valid or now, old.t_valid or old.event_time),
                    now,
                    to_payload,
                    "supersede",
                    {"reason": _supersede_reason(old is superseded_target, memory, result)},
                    superseded_by=memory.id,
                )
        if superseded_target is not None:
            # Spec Layer 3: an explicit supersede validates the subject area it touches.
            self.meta.update_memory_fields(superseded_target.id, last_validated=now)
            result.superseded = sorted({*result.superseded, superseded_target.id})
        self._validate_cited(memory, request.source, now, result)
        self.meta.audit(
            namespace, "store", now, memory_id=memory.id, detail={"type": memory.type.value}
        )
        unused = unused_fields(request, memory.type)
        if unused:
            result.warnings.append(
                f"not part of {'an' if memory.type is MemoryType.EPISODIC else 'a'} "
                f"{memory.type.value} memory, so not stored: {', '.join(unused)} "
                f"({_UNUSED_HINT[memory.type]})"
            )
        names = [r for r in resolutions if r.entity_id is not None]
        result.entities = [
            EntityLink(r.name, r.entity_id, r.method) for r in names if r.entity_id is not None
        ]
        result.chunks = memory.chunk_count
        result.pinned = memory.pinned
        return result

    def _supersede_target(self, memory: Memory, supersedes: str | None) -> Memory | None:
        """The memory ``supersedes`` names (in this namespace, of a type it may replace)."""
        if supersedes is None:
            return None
        target = self.meta.get_memory(supersedes)
        if target is None or target.namespace != memory.namespace:
            raise FerrexError(
                errors.NOT_FOUND,
                f"store: supersedes refers to an unknown memory id '{supersedes}' in "
                f"namespace '{memory.namespace}'; find the id with recall. Nothing was stored.",
                id=supersedes,
            )
        self._check_supersede_target(memory, target)
        return target

    def _validate_cited(
        self, memory: Memory, source: str | None, now: datetime, result: StoreOutcome
    ) -> None:
        """``source: "memory:<id>"`` confirms that memory (last_validated), or warns."""
        cited = _cited_memory(source)
        if cited is None or cited == memory.id:
            return
        target = self.meta.get_memory(cited)
        if target is None or target.namespace != memory.namespace:
            result.warnings.append(
                f"source memory:{cited[:40]} is not a memory of this namespace: nothing was "
                "validated (the memory was stored)"
            )
            return
        self.meta.update_memory_fields(cited, last_validated=now)
        self.meta.audit(
            memory.namespace,
            "validate",
            now,
            memory_id=cited,
            other_id=memory.id,
            detail={"reason": "cited as source"},
        )
        result.validated = [cited]

    def _check_supersede_target(self, memory: Memory, target: Memory) -> None:
        """An explicit supersede replaces a current memory of the same type: replacing a value
        that was already replaced would leave two current values and report a change that did
        not happen; a fact replacing a procedure (or an event a fact) is a wrong id."""
        if target.type is not memory.type:
            raise FerrexError(
                errors.INVALID_PARAMS,
                f"store: supersedes names a {target.type.value} memory ('{target.id}') but this "
                f"is a {memory.type.value} memory; a memory can only supersede one of its own "
                "type. Nothing was stored.",
                field="supersedes",
                id=target.id,
            )
        if target.t_invalid is None:
            return
        current = target
        for _ in range(64):  # follow the chain of replacements to today's value
            if current.superseded_by is None or current.t_invalid is None:
                break
            following = self.meta.get_memory(current.superseded_by)
            if following is None:
                break
            current = following
        if current.t_invalid is None and current.id != target.id:
            hint = f"the current value is '{current.id}': supersede that one instead"
        else:
            hint = "nothing replaced it that is still current: store without supersedes"
        raise FerrexError(
            errors.NOT_CURRENT,
            f"store: '{target.id}' is no longer current (superseded); {hint}. Nothing was stored.",
            id=target.id,
            current_id=current.id if current.t_invalid is None else None,
        )

    def _close_interval(
        self,
        old: Memory,
        t_invalid: datetime,
        now: datetime,
        to_payload: dict[str, Memory],
        action: str,
        detail: dict[str, Any],
        superseded_by: str | None = None,
    ) -> None:
        """End a current memory's validity at ``t_invalid`` (SQLite now, the index payload with
        the batch) and audit why: superseded by a new memory, or ended as stated."""
        fields: dict[str, Any] = {"t_invalid": t_invalid, "updated_at": now}
        if superseded_by is not None:
            fields["superseded_by"] = superseded_by
        self.meta.update_memory_fields(old.id, **fields)
        old.t_invalid = t_invalid
        to_payload[old.id] = old
        self.meta.audit(
            old.namespace, action, now, memory_id=old.id, other_id=superseded_by, detail=detail
        )

    def _tag_multi_valued(self, facts: Sequence[Memory]) -> list[str]:
        """Tag facts as values of a multi-valued relation (they stay current); their ids."""
        for fact in facts:
            if not fact.multi_valued:
                self.meta.update_memory_fields(fact.id, multi_valued=True)
        return [f.id for f in facts]

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
        self,
        namespace: str,
        names: Sequence[str],
        now: datetime,
        vectors: dict[str, Vector] | None = None,
    ) -> list[EntityResolution]:
        known = vectors or {}
        return [
            self.entities.resolve(
                namespace, name, create=True, at=now, vector=known.get(display_name(name))
            )
            for name in names
        ]

    def _dedup(
        self,
        item: _Prepared,
        batch_vectors: Sequence[tuple[_Prepared, Vector]],
        exclude: frozenset[str] = frozenset(),
        found: Duplicate | None = None,
    ) -> None:
        """Reject a near-duplicate of a same-type memory of the namespace (``exclude``: ids that
        may legitimately be close, e.g. the earlier versions of the procedure being updated)."""
        duplicate = found or self._find_duplicate(item, batch_vectors, exclude)
        if duplicate is not None:
            raise FerrexError(
                errors.DUPLICATE,
                f"similar memory already exists: {duplicate.memory_id} (cosine "
                f"{duplicate.similarity:.3f}). Nothing was stored; to replace it, store again with "
                f'supersedes="{duplicate.memory_id}".',
                existing_id=duplicate.memory_id,
                similarity=duplicate.similarity,
            )

    def _dedup_search(self, item: _Prepared, excluded: int = 0) -> tuple[IndexFilter, int]:
        """The filter and depth of an item's duplicate search."""
        memory = item.memory
        # A recurring event ("nightly backup completed") that the agent dates on another day is
        # another event, not a duplicate: compare only with the episodes of that UTC day.
        # Without a timestamp it is a re-store of something known, whatever its day.
        same_day = memory.type is MemoryType.EPISODIC and item.request.timestamp is not None
        day_start = datetime.combine(memory.event_time.astimezone(UTC).date(), time.min, tzinfo=UTC)
        # Facts about two subjects are two facts however alike their text ("frontend" and
        # "backend" use the same test runner): a fact is compared with its subject's facts only.
        subject = memory.subject_entity_id if memory.type is MemoryType.SEMANTIC else None
        flt = IndexFilter(
            namespace=memory.namespace,
            types=(memory.type.value,),
            model=self.embedder.info.pin,
            entity_ids=(subject,) if subject is not None else None,
            time_after=day_start if same_day else None,
            time_before=day_start + timedelta(days=1, microseconds=-1) if same_day else None,
        )
        # 8 nearest: the closest may differ in a distinguishing token (dedup.py) while a
        # true duplicate is a little further.
        return flt, 8 + excluded

    def _search_nearest(self, prepared: Sequence[_Prepared]) -> None:
        """Every episode's duplicate search of a bulk batch in one engine call (``nearest``).
        Facts (their subject is resolved in the transaction) and procedures (their earlier
        versions are excluded) are searched when checked."""
        episodes = [
            item
            for item in prepared
            if item.memory.type is MemoryType.EPISODIC and item.request.supersedes is None
        ]
        if len(episodes) < 2:
            return
        found = self.index.dense_search_many(
            [(item.vectors[0], *self._dedup_search(item)) for item in episodes],
            self.settings.retrieval.hnsw_ef,
        )
        for item, hits in zip(episodes, found, strict=True):
            item.nearest = hits

    def _find_duplicate(
        self,
        item: _Prepared,
        batch_vectors: Sequence[tuple[_Prepared, Vector]],
        exclude: frozenset[str] = frozenset(),
    ) -> Duplicate | None:
        memory = item.memory
        vector = item.vectors[0]
        same_day = memory.type is MemoryType.EPISODIC and item.request.timestamp is not None
        day = memory.event_time.astimezone(UTC).date()
        subject = memory.subject_entity_id if memory.type is MemoryType.SEMANTIC else None
        if item.nearest is not None and not exclude:
            nearest = item.nearest
        else:
            nearest = self.index.dense_search(
                vector, *self._dedup_search(item, len(exclude)), self.settings.retrieval.hnsw_ef
            )
        # Only a hit above the threshold can be the duplicate: the others' rows are not read.
        threshold = self.settings.dedup.threshold
        hits = [hit for hit in nearest if hit.memory_id not in exclude and hit.score > threshold]
        rows = self.meta.get_memories([hit.memory_id for hit in hits]) if hits else {}
        if subject is not None and hits:
            hits = [
                hit
                for hit in hits
                if hit.memory_id in rows and rows[hit.memory_id].subject_entity_id == subject
            ]
        texts = {memory_id: embed_text(row) for memory_id, row in rows.items()}
        for other, other_vector in batch_vectors:
            if (
                other.memory.namespace == memory.namespace
                and other.memory.type is memory.type
                and other.memory.id not in exclude
                and (subject is None or other.memory.subject_entity_id == subject)
                and (not same_day or other.memory.event_time.astimezone(UTC).date() == day)
            ):
                score = float(np.dot(vector, other_vector))
                if score > threshold:
                    hits.append(IndexHit(point_id="", memory_id=other.memory.id, score=score))
                    texts[other.memory.id] = embed_text(other.memory)
        return find_duplicate(hits, threshold, text=embed_text(memory), texts=texts)

    def _facts_of(self, memory: Memory, canonical: str) -> list[Memory]:
        """Every fact (current and past) of the memory's subject under ``canonical``."""
        if memory.subject_entity_id is None:
            return []
        return self.meta.facts_for_predicate(memory.namespace, memory.subject_entity_id, canonical)

    def _decide_fact(
        self,
        memory: Memory,
        request: StoreRequest,
        canonical: str,
        now: datetime,
        facts: Sequence[Memory],
    ) -> tuple[conflicts.ConflictDecision, list[Memory]]:
        """The conflict decision for ``memory`` as a value of (subject, ``canonical``), given
        that relation's ``facts``."""
        namespace = memory.namespace
        current = [f for f in facts if f.t_invalid is None]
        history = [f for f in facts if f.t_invalid is not None]
        # A (subject, predicate) already tagged multi-valued keeps collecting values; a keyed
        # predicate (named, versioned values) replaces a value of the same name whatever the tags.
        explicit_multi = self._multi_valued(namespace, request, canonical)
        keyed = not explicit_multi and canonical in self._keyed_predicates(namespace)
        multi = not keyed and (explicit_multi or any(f.multi_valued for f in current))
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
            history=history,
            keyed=keyed,
        )
        return decision, current

    def _keyed_predicates(self, namespace: str) -> set[str]:
        normalizer = self.normalizer(namespace)
        return {normalizer.canonical(p) for p in self.settings.conflict.keyed_predicates}

    def _object_cosine(self, a: str, b: str) -> float:
        va, vb = self.embedder.embed_documents([a, b])
        return float(np.dot(va, vb))

    @staticmethod
    def _known_interval(
        memory: Memory, facts: Sequence[Memory], t_invalid: datetime
    ) -> Memory | None:
        """A fact of ``facts`` with the same value whose validity overlaps [t_valid, t_invalid):
        the history being added is already known."""
        start = memory.t_valid or memory.event_time
        wanted = conflicts.normalize_object(memory.object or "")
        for fact in facts:
            fact_start = fact.t_valid or fact.event_time
            if (
                conflicts.normalize_object(fact.object or "") == wanted
                and fact_start < t_invalid
                and (fact.t_invalid is None or fact.t_invalid > start)
            ):
                return fact
        return None

    def _without_look_alikes(
        self,
        memory: Memory,
        request: StoreRequest,
        resolution: PredicateResolution,
        facts: Sequence[Memory],
        alike: Sequence[conflicts.LookAlike],
    ) -> tuple[PredicateResolution, list[Memory]]:
        """The predicate and the facts to decide on once look-alike facts are set aside: only
        facts stated under this subject and predicate; a predicate that matched another only
        by Jaro-Winkler and has no fact of its own yet is a relation of its own ("https_port"
        next to "http_port"), not a second value of the other."""
        normalizer = self.normalizer(memory.namespace)

        def alike_stated(fact: Memory) -> bool:
            return conflicts.stated_alike(
                fact,
                subject=request.subject or "",
                predicate=request.predicate or "",
                same_subject=same_entity_name,
                same_predicate=normalizer.same_relation,
            )

        kept = [f for f in facts if alike_stated(f)]
        if (
            resolution.method == "fuzzy"
            and all(a.field == "predicate" for a in alike)
            and not any(
                normalizer.same_relation(f.predicate or "", request.predicate or "") for f in facts
            )
        ):
            resolution = PredicateResolution(
                resolution.raw, resolution.normalized, resolution.normalized, "new", 1.0, None
            )
            memory.predicate_canonical = resolution.canonical
            kept = [f for f in self._facts_of(memory, resolution.canonical) if alike_stated(f)]
        return resolution, kept

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
        out: StoreOutcome,
    ) -> _Fact:
        memory, request = item.memory, item.request
        normalizer = self.normalizer(memory.namespace)
        existing_predicates: list[str] = []
        if memory.subject_entity_id is not None:
            existing_predicates = self.meta.predicates_of_subject(
                memory.namespace, memory.subject_entity_id
            )
        resolution = normalizer.resolve(request.predicate or "", existing_predicates)
        memory.predicate_canonical = resolution.canonical
        out.predicate_canonical = resolution.canonical
        out.predicate_resolved_by = resolution.method
        if explicit_supersede:
            out.status = Outcome.SUPERSEDED
            return _Fact()
        facts = self._facts_of(memory, resolution.canonical)
        if request.t_invalid is not None:
            return self._ended(item, facts, request.t_invalid, now, out)
        decision, current = self._decide_fact(memory, request, resolution.canonical, now, facts)
        alike = conflicts.look_alikes(
            decision,
            subject=request.subject or "",
            predicate=request.predicate or "",
            same_subject=same_entity_name,
            same_predicate=normalizer.same_relation,
        )
        if alike:
            # Never overwrite a current fact on a look-alike name alone: decide again with the
            # facts stated under this subject and predicate; the look-alikes stay current.
            resolution, facts = self._without_look_alikes(memory, request, resolution, facts, alike)
            out.predicate_canonical = resolution.canonical
            out.predicate_resolved_by = resolution.method
            decision, current = self._decide_fact(memory, request, resolution.canonical, now, facts)
            out.possible_alias = [_possible_alias(a) for a in alike]
        if decision.outcome is conflicts.Outcome.NEW:
            if not alike:
                # A near-duplicate triple under another predicate is refused loudly, with its
                # id: the triple's cosine cannot tell "db version" (the same relation, reworded)
                # from "previous release version" (another one), so the agent decides
                # (supersedes=id).
                self._dedup(item, batch_vectors)
            return _Fact()  # (with look-alikes: new beside them)
        if decision.outcome is conflicts.Outcome.DUPLICATE:
            return self._confirmed(memory, decision, now)
        _set_similarity(out, decision.similarity)
        canonical = resolution.canonical
        return self._apply_decision(memory, decision, current, facts, canonical, now, out)

    def _ended(
        self,
        item: _Prepared,
        facts: list[Memory],
        t_invalid: datetime,
        now: datetime,
        out: StoreOutcome,
    ) -> _Fact:
        """A fact the caller says has ended is history as given: it changes no current fact
        (or, for the current value itself, ends it)."""
        memory, request = item.memory, item.request
        if not _dated(request):
            # Without t_valid, the fact ending is the stored one with this value (the current
            # one first): it ends using its own t_valid.
            _adopt_start(memory, facts, t_invalid)
        known = self._known_interval(memory, facts, t_invalid)
        if (
            known is not None
            and known.t_invalid is None
            and t_invalid > (known.t_valid or known.event_time)
        ):
            # The current value, now said to have ended: it becomes history at t_invalid (how
            # a fact ends without inventing a replacement value).
            ended = StoreOutcome(
                known.id, MemoryType.SEMANTIC, memory.namespace, Outcome.ENDED, t_invalid=t_invalid
            )
            return _Fact(answer=ended, end=(known, t_invalid))
        if known is not None:
            return _Fact(answer=_known_history(known))
        if t_invalid <= (memory.t_valid or now):
            raise _ends_before_start()
        memory.t_invalid = t_invalid
        out.status = Outcome.HISTORICAL
        self.meta.audit(
            memory.namespace,
            "historical",
            now,
            memory_id=memory.id,
            detail={"reason": "t_invalid"},
        )
        return _Fact()

    def _confirmed(
        self, memory: Memory, decision: conflicts.ConflictDecision, now: datetime
    ) -> _Fact:
        """The value is already known: the existing fact is confirmed (last_validated), not
        changed (updated_at would restart the retention window of a superseded duplicate)."""
        existing = decision.duplicate_of
        assert existing is not None
        updates: dict[str, Any] = {"last_validated": now}
        if memory.confidence > existing.confidence:
            updates["confidence"] = memory.confidence
        self.meta.update_memory_fields(existing.id, **updates)
        similarity = (
            None
            if decision.similarity is None
            else {
                "score": round(decision.similarity.score, 4),
                "method": decision.similarity.method,
            }
        )
        self.meta.audit(
            memory.namespace,
            "duplicate",
            now,
            memory_id=existing.id,
            detail={"incoming_object": memory.object, "similarity": similarity},
        )
        duplicate = StoreOutcome(
            existing.id,
            MemoryType.SEMANTIC,
            memory.namespace,
            Outcome.DUPLICATE,
            duplicate_of=existing.id,
            confirmed=True,
            confidence=max(existing.confidence, memory.confidence),
        )
        _set_similarity(duplicate, decision.similarity)
        return _Fact(answer=duplicate)

    def _apply_decision(
        self,
        memory: Memory,
        decision: conflicts.ConflictDecision,
        current: list[Memory],
        facts: list[Memory],
        canonical: str,
        now: datetime,
        out: StoreOutcome,
    ) -> _Fact:
        """A value that differs from the current ones: another of several values, history,
        a contradiction, or the new current value."""
        namespace = memory.namespace
        if decision.outcome is conflicts.Outcome.MULTI_VALUED:
            memory.multi_valued = True
            out.status = Outcome.STORED
            out.multi_valued = True
            out.also_current = self._tag_multi_valued(current)
            detail = {"also_current": out.also_current, "predicate": canonical}
            self.meta.audit(namespace, "multi_valued", now, memory_id=memory.id, detail=detail)
            return _Fact()
        if decision.outcome is conflicts.Outcome.HISTORICAL:
            assert decision.new_t_invalid is not None
            known = self._known_interval(memory, facts, decision.new_t_invalid)
            if known is not None:
                return _Fact(answer=_known_history(known))
            memory.t_invalid = decision.new_t_invalid
            keeper = decision.superseded_by_existing
            memory.superseded_by = keeper.id if keeper else None
            out.status = Outcome.HISTORICAL
            out.superseded_by = memory.superseded_by
            self.meta.audit(
                namespace, "historical", now, memory_id=memory.id, other_id=memory.superseded_by
            )
            return _Fact()
        if decision.outcome is conflicts.Outcome.CONTRADICTION:
            out.status = Outcome.CONTRADICTION
            out.contradicts = [f.id for f in decision.contradicts]
            detail = {"contradicts": out.contradicts}
            self.meta.audit(namespace, "contradiction", now, memory_id=memory.id, detail=detail)
            return _Fact()
        out.status = Outcome.SUPERSEDED
        out.superseded = [f.id for f in decision.invalidate]
        if decision.coexists:
            # A keyed value replaced its namesake; the values of other names stay current.
            memory.multi_valued = True
            out.also_current = self._tag_multi_valued(decision.coexists)
        return _Fact(invalidate=list(decision.invalidate))

    def _procedural(
        self,
        item: _Prepared,
        now: datetime,
        invalidate: list[Memory],
        batch_vectors: Sequence[tuple[_Prepared, Vector]],
        explicit_supersede: bool,
        out: StoreOutcome,
    ) -> None:
        memory = item.memory
        request = item.request
        if not memory.name:
            if not explicit_supersede:
                self._dedup(item, batch_vectors)
            if request.version is not None:
                out.warnings.append(
                    "version not stored: ferrex numbers the versions of named procedures only "
                    "(give a name to version this procedure)"
                )
            return
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
            if current is not None and same_definition(current, memory):
                raise FerrexError(
                    errors.DUPLICATE,
                    f"store: procedure '{current.name}' version {current.version} already has "
                    f"exactly the steps of version {request.rollback_to}: nothing to roll back. "
                    "Nothing was stored.",
                    existing_id=current.id,
                    similarity=1.0,
                )
            vectors = self.sync.plan([memory])[0]
            item.chunks = vectors.chunks
            item.vectors = vectors.vectors
            item.tokens = vectors.tokens
            memory.chunk_count = len(item.chunks)
            out.rolled_back_to = request.rollback_to
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
        out.version = memory.version
        if request.version is not None and request.version != memory.version:
            out.warnings.append(
                f"ferrex numbers versions itself: this is version {memory.version} of "
                f"'{memory.name}' (version {request.version} was asked for)"
            )
        if current is not None:
            invalidate.append(current)
            out.previous_version_id = current.id
            out.previous_version = current.version
        if memory.version > 1:
            self.meta.audit(
                memory.namespace,
                "version",
                now,
                memory_id=memory.id,
                other_id=current.id if current else None,
                detail={"version": memory.version},
            )

    def _procedure_versions(self, namespace: str, name: str) -> list[Memory]:
        """Every version of the named procedure (names compare case- and spacing-insensitively)."""
        rows = self.meta.named_procedures(namespace)
        return [m for m in rows if same_name(m.name, name)]


_FIELDS_OF_OTHER_TYPES: dict[MemoryType, tuple[str, ...]] = {
    MemoryType.EPISODIC: (
        "subject",
        "predicate",
        "object",
        "t_valid",
        "t_invalid",
        "multi_valued",
        "name",
        "conditions",
        "steps",
        "version",
    ),
    MemoryType.SEMANTIC: ("content", "name", "conditions", "steps", "version"),
    MemoryType.PROCEDURAL: (
        "subject",
        "predicate",
        "object",
        "t_valid",
        "t_invalid",
        "multi_valued",
    ),
}
_UNUSED_HINT: dict[MemoryType, str] = {
    MemoryType.EPISODIC: "a fact needs subject, predicate and object; a procedure needs "
    "type 'procedural' or steps",
    MemoryType.SEMANTIC: "a fact is its subject, predicate and object; store the rest as an "
    "episodic memory",
    MemoryType.PROCEDURAL: "store the fact as a semantic memory of its own",
}


def unused_fields(request: StoreRequest, memory_type: MemoryType) -> list[str]:
    """Fields the caller gave that a memory of ``memory_type`` has no place for (the store
    says so rather than dropping them silently)."""
    out: list[str] = []
    for name in _FIELDS_OF_OTHER_TYPES[memory_type]:
        value = getattr(request, name)
        if value is None or value is False or value == []:
            continue
        out.append(name)
    return out


def _fill_fact(memory: Memory, request: StoreRequest, now: datetime) -> None:
    """A fact's triple and validity; a history fact (``t_invalid``) checked against them."""
    memory.subject = request.subject
    memory.predicate = request.predicate
    memory.object = request.object
    memory.t_valid = request.t_valid or request.timestamp or now
    memory.event_time = memory.t_valid
    if request.t_invalid is None:
        return
    if request.supersedes is not None:
        raise FerrexError(
            errors.INVALID_PARAMS,
            "store: a fact given with t_invalid is history and cannot supersede "
            "another memory; drop one of the two",
            field="t_invalid",
        )
    if request.t_invalid > now:
        raise FerrexError(
            errors.INVALID_PARAMS,
            "store: t_invalid is in the future, so the fact is still true now: "
            "store it without t_invalid (it is current) and supersede it when it "
            "ends",
            field="t_invalid",
        )
    if _dated(request) and request.t_invalid <= memory.t_valid:
        raise _ends_before_start()


def _dated(request: StoreRequest) -> bool:
    """Whether the caller said when the fact became true (t_valid, or timestamp)."""
    return request.t_valid is not None or request.timestamp is not None


def _ends_before_start() -> FerrexError:
    return FerrexError(
        errors.INVALID_PARAMS,
        "store: t_invalid must be after t_valid (when the fact became true). Without t_valid, "
        "t_invalid ends the stored fact with this value; no such fact began before t_invalid, "
        "so give t_valid to store a fact that ended in the past. Nothing was stored.",
        field="t_invalid",
    )


def _adopt_start(memory: Memory, facts: Sequence[Memory], t_invalid: datetime) -> None:
    """Give ``memory`` the t_valid of the stored fact with its value that began before
    ``t_invalid`` (the current one, else the latest)."""
    wanted = conflicts.normalize_object(memory.object or "")
    same = [
        f
        for f in facts
        if conflicts.normalize_object(f.object or "") == wanted
        and (f.t_valid or f.event_time) < t_invalid
    ]
    if not same:
        return
    chosen = max(same, key=lambda f: (f.t_invalid is None, f.t_valid or f.event_time, f.id))
    memory.t_valid = chosen.t_valid or chosen.event_time
    memory.event_time = memory.t_valid


def _known_history(known: Memory) -> StoreOutcome:
    """The answer to a past value that is already stored for (part of) that time."""
    return StoreOutcome(
        known.id, MemoryType.SEMANTIC, known.namespace, Outcome.DUPLICATE, duplicate_of=known.id
    )


def _possible_alias(alike: conflicts.LookAlike) -> PossibleAlias:
    """A current fact kept next to the stored one because its subject or predicate only looks
    like this one's (conflict.look_alikes)."""
    fact = alike.fact
    return PossibleAlias(
        fact.id, alike.field, alike.name, alike.other, fact.subject, fact.predicate, fact.object
    )


def _set_similarity(outcome: StoreOutcome, similarity: Any) -> None:
    if similarity is not None:
        outcome.similarity = round(similarity.score, 4)
        outcome.similarity_method = similarity.method


def _supersede_reason(explicit: bool, memory: Memory, result: StoreOutcome) -> str:
    """Why an old memory was invalidated (audit log)."""
    if explicit:
        return "explicit"
    if memory.type is MemoryType.PROCEDURAL:
        return f"new version {memory.version}"
    return str(result.status)


def _cited_memory(source: str | None) -> str | None:
    """``memory:<id>`` (or ``episodic:<id>`` etc.) names a memory this one was derived from."""
    if not source or ":" not in source:
        return None
    scheme, _, rest = source.partition(":")
    if scheme in {"memory", "episodic", "semantic", "procedural"} and rest:
        return rest.strip()
    return None
