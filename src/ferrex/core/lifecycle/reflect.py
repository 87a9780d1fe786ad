"""The reflect tool (spec Layer 5, "Staleness audit via reflect").

Surfaces what needs the agent's judgement: stale or unvalidated memories (with reasons),
contradictions between current facts, the least-used memories as forget candidates, entity
alias candidates and entities nobody mentions any more. ``confirm_ids`` validates reviewed
memories (bumps ``last_validated``); ``pin_ids`` / ``unpin_ids`` exempt memories from decay and
eviction.
"""

from __future__ import annotations

from ferrex.core.clock import days_ago
from ferrex.core.deps import Deps
from ferrex.core.lifecycle.decay import decay_score
from ferrex.core.lifecycle.staleness import (
    FRESH,
    STALE,
    age_days,
    assess,
    days_since_validation,
    effective_confidence,
    review_reasons,
)
from ferrex.core.memory import MemoryType
from ferrex.core.requests import ReflectRequest
from ferrex.core.results import (
    AliasCandidate,
    ForgetCandidate,
    InactiveEntity,
    ReflectActions,
    ReflectReport,
    ReviewItem,
)


def _apply_actions(deps: Deps, request: ReflectRequest, namespace: str) -> ReflectActions:
    actions = ReflectActions()
    wanted = {
        "confirmed": request.confirm_ids or [],
        "pinned": request.pin_ids or [],
        "unpinned": request.unpin_ids or [],
    }
    if not any(wanted.values()):
        return actions
    meta = deps.meta
    now = deps.now()
    not_found: set[str] = set()
    with deps.write, meta.transaction():
        for key, ids in wanted.items():
            if not ids:
                continue
            existing = meta.existing_ids(ids, namespace)
            done = [i for i in dict.fromkeys(ids) if i in existing]
            not_found.update(i for i in ids if i not in existing)
            for memory_id in done:
                if key == "confirmed":
                    meta.update_memory_fields(memory_id, last_validated=now)
                    meta.audit(
                        namespace,
                        "validate",
                        now,
                        memory_id=memory_id,
                        detail={"reason": "reflect confirm"},
                    )
                else:
                    meta.update_memory_fields(memory_id, pinned=key == "pinned")
                    meta.audit(
                        namespace, "pin" if key == "pinned" else "unpin", now, memory_id=memory_id
                    )
            setattr(actions, key, done)
    deps.cache.invalidate(namespace)
    actions.not_found = sorted(not_found)
    confirmed = actions.confirmed or []
    if confirmed:
        rows = meta.get_memories(confirmed)
        still = [
            i
            for i in confirmed
            if i in rows and assess(rows[i], now, deps.settings.staleness).staleness == STALE
        ]
        actions.still_stale = still
    return actions


def reflect(deps: Deps, request: ReflectRequest) -> ReflectReport:
    namespace = request.namespace or deps.namespace
    actions = _apply_actions(deps, request, namespace)
    report = ReflectReport(namespace, actions, [], [], [])
    meta = deps.meta
    now = deps.now()
    limit = request.limit
    memories = meta.current_memories(namespace)
    assessed = [(m, assess(m, now, deps.settings.staleness)) for m in memories]

    if request.include_stale:
        config = deps.settings.staleness
        review = []
        for memory, fresh in assessed:
            reasons = review_reasons(memory, now, config, fresh)
            if reasons:
                since = days_since_validation(memory, now)
                confidence = effective_confidence(memory, now, config)
                review.append((fresh.score, memory, fresh, reasons, since, confidence))
        review.sort(key=lambda r: (-r[0], r[1].id))
        report.needs_review = [
            ReviewItem(
                m,
                f,
                reasons,
                since,
                confidence if m.type is MemoryType.SEMANTIC else None,
            )
            for _, m, f, reasons, since, confidence in review[:limit]
        ]
        report.needs_review_total = len(review)

    if request.include_contradictions:
        report.contradictions = [
            list(group) for group in meta.contradiction_groups(namespace, limit=limit)
        ]

    half_life = deps.settings.lifecycle.episodic_half_life_days
    # Aging or stale episodes nobody recalls; fresh ones are never suggested for forgetting.
    candidates = [
        (m.access_count, decay_score(m, now, half_life), m)
        for m, fresh in assessed
        if not m.pinned and m.type is MemoryType.EPISODIC and fresh.staleness != FRESH
    ]
    candidates.sort(key=lambda c: (c[0], c[1], c[2].id))
    report.forget_candidates = [
        ForgetCandidate(m, count, relevance, age_days(m, now))
        for count, relevance, m in candidates[:limit]
    ]
    report.alias_candidates = [
        AliasCandidate(c["name"], c["display_name"], c["entity_id"], c["score"])
        for c in meta.alias_candidates(namespace, limit)
    ]
    cutoff = days_ago(now, deps.settings.lifecycle.inactive_entity_days)
    report.inactive_entities = [
        InactiveEntity(e["display_name"], e["last_reference"], e["memories"])
        for e in meta.inactive_entities(namespace, cutoff, limit)
    ]
    return report


class Reflect:
    """The reflect use case."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    def run(self, request: ReflectRequest) -> ReflectReport:
        return reflect(self.deps, request)
