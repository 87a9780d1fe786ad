"""A semantic store against its subject's facts (spec, store step 6): the predicate resolved,
the conflict decision (duplicate, another value, history, contradiction, supersede), a fact
said to have ended, look-alike subjects and predicates set aside."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from ferrex.core.deps import Deps
from ferrex.core.ingest import conflict as conflicts
from ferrex.core.ingest.dedup import DuplicateCheck
from ferrex.core.ingest.draft import Prepared, dated, ends_before_start
from ferrex.core.matching.entities import same_entity_name
from ferrex.core.matching.predicates import PredicateResolution
from ferrex.core.memory import Memory, MemoryType
from ferrex.core.ports import (
    Vector,
)
from ferrex.core.requests import StoreRequest
from ferrex.core.results import Outcome, PossibleAlias, StoreOutcome


@dataclass
class _Fact:
    """How a semantic store resolved against its subject's facts."""

    answer: StoreOutcome | None = None  # names an existing memory: nothing new is written
    invalidate: list[Memory] = field(default_factory=list)
    end: tuple[Memory, datetime] | None = None  # a current fact said to have ended


class FactStep:
    """Resolves a semantic memory against the facts already stored for its subject."""

    def __init__(self, deps: Deps, dedup: DuplicateCheck) -> None:
        self.settings = deps.settings
        self.meta = deps.meta
        self.embedder = deps.embedder
        self.normalizer = deps.normalizer
        self.dedup = dedup

    def resolve(
        self,
        item: Prepared,
        now: datetime,
        explicit_supersede: bool,
        batch_vectors: Sequence[tuple[Prepared, Vector]],
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
        if decision.outcome is conflicts.Verdict.NEW:
            if not alike:
                # A near-duplicate triple under another predicate is refused loudly, with its
                # id: the triple's cosine cannot tell "db version" (the same relation, reworded)
                # from "previous release version" (another one), so the agent decides
                # (supersedes=id).
                self.dedup.reject(item, batch_vectors)
            return _Fact()  # (with look-alikes: new beside them)
        if decision.outcome is conflicts.Verdict.DUPLICATE:
            return self._confirmed(memory, decision, now)
        _set_similarity(out, decision.similarity)
        canonical = resolution.canonical
        return self._apply_decision(memory, decision, current, facts, canonical, now, out)

    def _ended(
        self,
        item: Prepared,
        facts: list[Memory],
        t_invalid: datetime,
        now: datetime,
        out: StoreOutcome,
    ) -> _Fact:
        """A fact the caller says has ended is history as given: it changes no current fact
        (or, for the current value itself, ends it)."""
        memory, request = item.memory, item.request
        if not dated(request):
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
            raise ends_before_start()
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
        if decision.outcome is conflicts.Verdict.MULTI_VALUED:
            memory.multi_valued = True
            out.status = Outcome.STORED
            out.multi_valued = True
            out.also_current = self._tag_multi_valued(current)
            detail = {"also_current": out.also_current, "predicate": canonical}
            self.meta.audit(namespace, "multi_valued", now, memory_id=memory.id, detail=detail)
            return _Fact()
        if decision.outcome is conflicts.Verdict.HISTORICAL:
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
        if decision.outcome is conflicts.Verdict.CONTRADICTION:
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

    def _tag_multi_valued(self, facts: Sequence[Memory]) -> list[str]:
        """Tag facts as values of a multi-valued relation (they stay current); their ids."""
        for fact in facts:
            if not fact.multi_valued:
                self.meta.update_memory_fields(fact.id, multi_valued=True)
        return [f.id for f in facts]

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
