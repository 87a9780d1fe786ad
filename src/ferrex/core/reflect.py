"""The reflect tool (spec Layer 5, "Staleness audit via reflect").

Surfaces what needs the agent's judgement: stale or unvalidated memories (with reasons),
contradictions between current facts, the least-used memories as forget candidates, entity
alias candidates and entities nobody mentions any more. ``confirm_ids`` validates reviewed
memories (bumps ``last_validated``); ``pin_ids`` / ``unpin_ids`` exempt memories from decay and
eviction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ferrex.core.clock import days_ago, to_iso
from ferrex.core.lifecycle import relevance_score
from ferrex.core.memory import MemoryType
from ferrex.core.requests import ReflectRequest
from ferrex.core.staleness import (
    FRESH,
    STALE,
    age_days,
    assess,
    days_since_validation,
    effective_confidence,
    review_reasons,
)

if TYPE_CHECKING:
    from ferrex.core.service import MemoryService


def _apply_actions(
    service: MemoryService, request: ReflectRequest, namespace: str
) -> dict[str, Any]:
    actions: dict[str, Any] = {}
    wanted = {
        "confirmed": request.confirm_ids or [],
        "pinned": request.pin_ids or [],
        "unpinned": request.unpin_ids or [],
    }
    if not any(wanted.values()):
        return actions
    meta = service.meta
    now = service.now()
    not_found: set[str] = set()
    with service._write, meta.transaction():
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
            actions[key] = done
    service.cache.invalidate(namespace)
    if not_found:
        actions["not_found"] = sorted(not_found)
    confirmed = actions.get("confirmed") or []
    if confirmed:
        rows = meta.get_memories(confirmed)
        still = [
            i
            for i in confirmed
            if i in rows and assess(rows[i], now, service.settings.staleness).staleness == STALE
        ]
        if still:
            actions["still_stale"] = still
            actions["still_stale_note"] = (
                "confirmed, but still stale by age (an old memory stays old): they stay out of "
                "default recalls (use include_stale=true), off the review list and out of "
                "stats' needs_attention; store a current summary citing them "
                "(source='memory:<id>') if they still matter"
            )
    return actions


def reflect(service: MemoryService, request: ReflectRequest) -> dict[str, Any]:
    namespace = request.namespace or service.namespace
    out: dict[str, Any] = {"namespace": namespace}
    out.update(_apply_actions(service, request, namespace))
    meta = service.meta
    now = service.now()
    limit = request.limit
    memories = meta.memories_in_namespace(
        namespace, where="t_invalid IS NULL", order="created_at, id"
    )
    assessed = [(m, assess(m, now, service.settings.staleness)) for m in memories]

    if request.include_stale:
        config = service.settings.staleness
        review = []
        for memory, fresh in assessed:
            reasons = review_reasons(memory, now, config, fresh)
            if reasons:
                since = days_since_validation(memory, now)
                confidence = effective_confidence(memory, now, config)
                review.append((fresh.score, memory, fresh, reasons, since, confidence))
        review.sort(key=lambda r: (-r[0], r[1].id))
        out["needs_review"] = [
            {
                "id": m.id,
                "type": m.type.value,
                "summary": m.summary(80),
                "staleness": f.staleness,
                "age_days": f.age_days,
                "days_since_validation": int(since),
                **(
                    {"effective_confidence": round(confidence, 3)}
                    if m.type is MemoryType.SEMANTIC
                    else {}
                ),
                "reasons": reasons,
            }
            for _, m, f, reasons, since, confidence in review[:limit]
        ]
        out["needs_review_total"] = len(review)

    if request.include_contradictions:
        groups = meta.contradiction_groups(namespace, limit=limit)
        out["contradictions"] = [
            {
                "subject": group[0].subject,
                "predicate": group[0].predicate,
                "predicate_canonical": group[0].predicate_canonical,
                "facts": [
                    {
                        "id": f.id,
                        "object": f.object,
                        "confidence": f.confidence,
                        "t_valid": to_iso(f.t_valid) if f.t_valid else None,
                    }
                    for f in group
                ],
            }
            for group in groups
        ]

    half_life = service.settings.lifecycle.episodic_half_life_days
    # Aging or stale episodes nobody recalls; fresh ones are never suggested for forgetting.
    candidates = [
        (m.access_count, relevance_score(m, now, half_life), m)
        for m, fresh in assessed
        if not m.pinned and m.type is MemoryType.EPISODIC and fresh.staleness != FRESH
    ]
    candidates.sort(key=lambda c: (c[0], c[1], c[2].id))
    out["forget_candidates"] = [
        {
            "id": m.id,
            "type": m.type.value,
            "summary": m.summary(80),
            "access_count": count,
            "relevance": round(relevance, 4),
            "age_days": int(age_days(m, now)),
        }
        for count, relevance, m in candidates[:limit]
    ]
    out["alias_candidates"] = [
        {
            "name": c["name"],
            "entity": c["display_name"],
            "entity_id": c["entity_id"],
            "score": round(c["score"], 4),
        }
        for c in meta.alias_candidates(namespace, limit)
    ]
    cutoff = days_ago(now, service.settings.lifecycle.inactive_entity_days)
    out["inactive_entities"] = [
        {
            "name": e["display_name"],
            "last_reference": e["last_reference"],
            "memories": e["memories"],
        }
        for e in meta.inactive_entities(namespace, cutoff, limit)
    ]
    out["hint"] = (
        "Confirm what is still true with reflect(confirm_ids=[...]); fix outdated facts with "
        "store(..., supersedes=id); remove wrong memories with forget(ids=[...])."
    )
    return out
