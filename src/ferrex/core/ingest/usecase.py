"""The store use case (spec, store steps 1-8): draft, embed, then in one transaction
resolve entities, check duplicates and conflicts, number procedure versions, write SQLite and
the journal; then the index (the dual write), the caches and the storage budget."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import structlog

from ferrex.core import errors
from ferrex.core.call_keys import record, recorded
from ferrex.core.clock import to_iso
from ferrex.core.deps import Deps
from ferrex.core.errors import FerrexError
from ferrex.core.index.sync import (
    PHASE_AFTER_COMMIT,
    PHASE_AFTER_INDEX,
    PHASE_BEFORE_COMMIT,
    PlannedMemory,
)
from ferrex.core.index.sync import checkpoint as _checkpoint
from ferrex.core.ingest.dedup import DuplicateCheck
from ferrex.core.ingest.draft import UNUSED_HINT, Drafting, Prepared, unused_fields
from ferrex.core.ingest.facts import FactStep
from ferrex.core.ingest.versioning import ProcedureStep
from ferrex.core.lifecycle.upkeep import Upkeep
from ferrex.core.matching.entities import EntityResolution, display_name
from ferrex.core.memory import Memory, MemoryType
from ferrex.core.ports import (
    Vector,
)
from ferrex.core.requests import StoreRequest
from ferrex.core.results import EntityLink, Outcome, StoreOutcome

log = structlog.get_logger("ferrex.ingest")


class Ingest:
    """The store use case (and its bulk form, for import and benchmarks)."""

    def __init__(self, deps: Deps, upkeep: Upkeep) -> None:
        self.deps = deps
        self.upkeep = upkeep
        self.settings = deps.settings
        self.meta = deps.meta
        self.sync = deps.sync
        self.entities = deps.entities
        self.now = deps.now
        self.drafting = Drafting(deps)
        self.dedup = DuplicateCheck(deps)
        self.facts = FactStep(deps, self.dedup)
        self.procedures = ProcedureStep(deps, self.dedup)

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
            prepared: list[Prepared | FerrexError] = [
                next(built) if isinstance(item, StoreRequest) else item for item in chunk
            ]
            ready = [p for p in prepared if isinstance(p, Prepared)]
            # The budget is enforced once, after the last batch: never on this call's writes.
            committed = iter(self._commit(ready, bulk=True, evict=False))
            for slot in prepared:
                out.append(next(committed) if isinstance(slot, Prepared) else slot)
        self._evict_after_store(out)
        return out

    # ------------------------------------------------------------------ preparation

    def _prepare(self, request: StoreRequest) -> Prepared:
        built = self._prepare_many([request])[0]
        if isinstance(built, FerrexError):
            raise built
        return built

    def _prepare_many(self, requests: Sequence[StoreRequest]) -> list[Prepared | FerrexError]:
        now = self.now()
        drafts: list[Prepared | FerrexError] = []
        for request in requests:
            try:
                drafts.append(self.drafting.draft(request, now))
            except FerrexError as exc:
                drafts.append(exc)
        texts: list[str] = []
        names: dict[str, list[Prepared]] = {}
        for draft in drafts:
            if isinstance(draft, Prepared):
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
            if isinstance(draft, Prepared):
                draft.vectors = vectors[cursor : cursor + len(draft.chunks)]
                draft.tokens = tokens[cursor : cursor + len(draft.chunks)]
                cursor += len(draft.chunks)
        for name, owners in names.items():
            for owner in owners:
                owner.name_vectors[name] = vectors[cursor]
            cursor += 1
        return drafts

    # ------------------------------------------------------------------ commit

    def _commit(
        self,
        prepared: Sequence[Prepared],
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
        batch_vectors: list[tuple[Prepared, Vector]] = []
        with self.deps.write:
            # Another connection's writes (an operator command) drop the caches, the
            # resolver's tables among them, before this one relies on them.
            self.deps.sync_external_writes()
            first = recorded(self.meta, key, StoreOutcome)
            if first is not None:  # the same call, applied meanwhile
                return [first]
            now = self.now()
            if bulk:
                self.dedup.search_nearest(prepared)
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
        item: Prepared,
        now: datetime,
        batch_vectors: list[tuple[Prepared, Vector]],
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
            fact = self.facts.resolve(
                item, now, superseded_target is not None, batch_vectors, result
            )
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
            self.procedures.apply(
                item, now, invalidate, batch_vectors, superseded_target is not None, result
            )
        else:
            if superseded_target is None:
                self.dedup.reject(item, batch_vectors)
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
                f"({UNUSED_HINT[memory.type]})"
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
