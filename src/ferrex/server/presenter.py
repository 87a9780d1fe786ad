"""What the agent reads: typed core results turned into tool answers (structured content).

The one place that decides the shape of every answer; core returns results
(``core/results.py``) and never builds answer dicts.
"""

from __future__ import annotations

from typing import Any

from ferrex.core.clock import to_iso
from ferrex.core.errors import FerrexError
from ferrex.core.memory import Memory, MemoryType
from ferrex.core.results import (
    ForgetResult,
    MemoryView,
    NamespaceCounts,
    Outcome,
    PossibleAlias,
    RecallHit,
    RecallResult,
    RecentMemory,
    ReflectReport,
    StatsBrief,
    StatsDetailed,
    StoreOutcome,
)

REFLECT_HINT = (
    "Confirm what is still true with reflect(confirm_ids=[...]); fix outdated facts with "
    "store(..., supersedes=id); remove wrong memories with forget(ids=[...])."
)
STILL_STALE_NOTE = (
    "confirmed, but still stale by age (an old memory stays old): they stay out of "
    "default recalls (use include_stale=true), off the review list and out of "
    "stats' needs_attention; store a current summary citing them "
    "(source='memory:<id>') if they still matter"
)
ORPHANED_NOTE = (
    "these superseded facts were replaced by a forgotten one, so their subject and "
    "predicate have no current value now: store the current value again if it is known"
)


def _mb(size: int) -> float:
    return round(size / (1024 * 1024), 2)


# ---------------------------------------------------------------------- store


def _store_message(outcome: StoreOutcome) -> str | None:
    if outcome.status is Outcome.ENDED:
        return (
            "the current fact now ends at t_invalid; it is history "
            "(include_invalidated / as_of still find it)"
        )
    if outcome.status is Outcome.DUPLICATE and outcome.type is MemoryType.SEMANTIC:
        if outcome.confirmed:
            return (
                "this fact is already known; it was confirmed (last_validated updated) "
                "instead of stored twice"
            )
        return "this value is already known for that time; nothing was stored"
    if outcome.status is Outcome.HISTORICAL:
        if outcome.superseded_by is not None:
            return "a newer value is already current; this fact was stored as history"
        return "stored as history: true from t_valid until t_invalid"
    if outcome.status is Outcome.CONTRADICTION:
        return (
            "a current fact with higher confidence says otherwise; both are kept and flagged. "
            "Resolve with store(supersedes=...) or forget."
        )
    return None


def present_store(outcome: StoreOutcome) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": outcome.id,
        "type": outcome.type.value,
        "namespace": outcome.namespace,
        "status": outcome.status.value,
    }
    if outcome.status is Outcome.ENDED:
        assert outcome.t_invalid is not None
        out["t_invalid"] = to_iso(outcome.t_invalid)
        out["message"] = _store_message(outcome)
        if outcome.evicted:
            out["evicted"] = outcome.evicted
        return out
    similarity = (
        None
        if outcome.similarity is None
        else {"score": outcome.similarity, "method": outcome.similarity_method}
    )
    if outcome.status is Outcome.DUPLICATE:
        out["duplicate_of"] = outcome.duplicate_of
        if outcome.confirmed:
            out["similarity"] = similarity
            out["confidence"] = outcome.confidence
        out["message"] = _store_message(outcome)
        if outcome.evicted:
            out["evicted"] = outcome.evicted
        return out
    if outcome.predicate_canonical is not None:
        out["predicate"] = {
            "canonical": outcome.predicate_canonical,
            "resolved_by": outcome.predicate_resolved_by,
        }
    if similarity is not None:
        out["similarity"] = similarity
    if outcome.multi_valued:
        out["multi_valued"] = True
    if outcome.also_current:
        out["also_current"] = outcome.also_current
    if outcome.status is Outcome.HISTORICAL:
        out["superseded_by"] = outcome.superseded_by if outcome.superseded_by else None
        if outcome.superseded_by is None:
            del out["superseded_by"]
    if outcome.contradicts:
        out["contradicts"] = outcome.contradicts
    if outcome.superseded:
        out["superseded"] = outcome.superseded
    message = _store_message(outcome)
    if message:
        out["message"] = message
    if outcome.version is not None:
        out["version"] = outcome.version
    if outcome.previous_version_id is not None:
        out["previous_version"] = {
            "id": outcome.previous_version_id,
            "version": outcome.previous_version,
        }
    if outcome.rolled_back_to is not None:
        out["rolled_back_to"] = outcome.rolled_back_to
    if outcome.validated:
        out["validated"] = outcome.validated
    if outcome.possible_alias:
        out["possible_alias"] = [_possible_alias(a) for a in outcome.possible_alias]
    if outcome.warnings:
        out["warnings"] = outcome.warnings
    if outcome.entities:
        out["entities"] = [
            {"name": e.name, "entity_id": e.entity_id, "resolved_by": e.resolved_by}
            for e in outcome.entities
        ]
    if outcome.chunks > 1:
        out["chunks"] = outcome.chunks
    if outcome.pinned:
        out["pinned"] = True
    if outcome.evicted:
        out["evicted"] = outcome.evicted
    return out


def _possible_alias(alias: PossibleAlias) -> dict[str, Any]:
    triple = f"('{alias.subject}', '{alias.predicate}', '{alias.object}')"
    return {
        "id": alias.id,
        "field": alias.field,
        "name": alias.name,
        "other": alias.other,
        "hint": f"'{alias.name}' only looks like '{alias.other}', so {alias.id} {triple} stays "
        "current next to this fact (nothing was superseded). If they are one thing and this "
        f"value replaces it, end it: store {triple} again with t_invalid (or forget it); "
        f"store with the {alias.field} '{alias.other}' from now on and new values supersede "
        "as usual.",
    }


def present_store_many(results: list[StoreOutcome | FerrexError]) -> list[dict[str, Any]]:
    return [
        {"error": r.to_dict()} if isinstance(r, FerrexError) else present_store(r) for r in results
    ]


# ---------------------------------------------------------------------- recall


def _memory_fields(memory: Memory) -> dict[str, Any]:
    item: dict[str, Any] = {"id": memory.id, "type": memory.type.value}
    if memory.type is MemoryType.SEMANTIC:
        item["content"] = memory.display_text()
        item.update(subject=memory.subject, predicate=memory.predicate, object=memory.object)
        item["confidence"] = memory.confidence
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
    else:
        item["content"] = memory.content
        item["timestamp"] = to_iso(memory.event_time)
    return item


def present_hit(hit: RecallHit) -> dict[str, Any]:
    memory = hit.memory
    item = _memory_fields(memory)
    if memory.type is MemoryType.SEMANTIC:
        if hit.effective_confidence is not None:
            item["effective_confidence"] = round(hit.effective_confidence, 3)
        item["t_valid"] = to_iso(memory.t_valid) if memory.t_valid else None
        if memory.t_invalid is not None:
            item["t_invalid"] = to_iso(memory.t_invalid)
            item["superseded_by"] = memory.superseded_by
        if memory.multi_valued:
            item["multi_valued"] = True
    elif memory.type is MemoryType.PROCEDURAL and memory.t_invalid is not None:
        item["t_invalid"] = to_iso(memory.t_invalid)
        item["superseded_by"] = memory.superseded_by
    item["score"] = round(hit.score, 6)
    item["age_days"] = hit.freshness.age_days
    item["entities"] = memory.entities
    item["created_at"] = to_iso(memory.created_at)
    item["freshness"] = hit.freshness.to_dict()
    if memory.source:
        item["source"] = memory.source
    if memory.context:
        item["context"] = memory.context
    if memory.pinned:
        item["pinned"] = True
    if hit.explain is not None:
        item["explain"] = hit.explain
    if hit.contradicts:
        item["contradiction"] = True
        item["contradicts"] = hit.contradicts
    if hit.included_as:
        item["included_as"] = hit.included_as
    return item


def present_recall(result: RecallResult) -> dict[str, Any]:
    results = [present_hit(hit) for hit in result.hits]
    out: dict[str, Any] = {
        "results": results,
        "count": len(results),
        "namespace": result.namespace,
        "reranked": result.reranked,
        "score_basis": result.score_basis,
        "stale_held_back": result.stale_held_back,
    }
    if result.rerank_status is not None:
        out["rerank_status"] = result.rerank_status
    if result.no_results is not None:
        out["no_results"] = result.no_results
    held = result.stale_held_back
    if held:
        out["note"] = (
            f"{held} stale memor{'y was' if held == 1 else 'ies were'} held back; "
            "call recall with include_stale=true to see them"
        )
    if result.truncated is not None:
        out["truncated"] = result.truncated
        out["tokens"] = result.tokens
    if result.unresolved_entities:
        out["unresolved_entities"] = result.unresolved_entities
    if result.cache_hit is not None:
        out["cache_hit"] = result.cache_hit
    return out


# ---------------------------------------------------------------------- forget


def present_forget(result: ForgetResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "deleted": result.deleted,
        "not_found": result.not_found,
        "entities_removed": result.entities_removed,
        "namespace": result.namespace,
    }
    if result.history_without_successor:
        out["history_without_successor"] = result.history_without_successor
        out["note"] = ORPHANED_NOTE
    return out


# ---------------------------------------------------------------------- reflect


def present_reflect(report: ReflectReport) -> dict[str, Any]:
    out: dict[str, Any] = {"namespace": report.namespace}
    actions = report.actions
    for key in ("confirmed", "pinned", "unpinned"):
        done = getattr(actions, key)
        if done is not None:
            out[key] = done
    if actions.not_found:
        out["not_found"] = actions.not_found
    if actions.still_stale:
        out["still_stale"] = actions.still_stale
        out["still_stale_note"] = STILL_STALE_NOTE
    if report.needs_review is not None:
        out["needs_review"] = [
            {
                "id": r.memory.id,
                "type": r.memory.type.value,
                "summary": r.memory.summary(80),
                "staleness": r.freshness.staleness,
                "age_days": r.freshness.age_days,
                "days_since_validation": int(r.days_since_validation),
                **(
                    {"effective_confidence": round(r.effective_confidence, 3)}
                    if r.effective_confidence is not None
                    else {}
                ),
                "reasons": r.reasons,
            }
            for r in report.needs_review
        ]
        out["needs_review_total"] = report.needs_review_total
    if report.contradictions is not None:
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
            for group in report.contradictions
        ]
    out["forget_candidates"] = [
        {
            "id": c.memory.id,
            "type": c.memory.type.value,
            "summary": c.memory.summary(80),
            "access_count": c.access_count,
            "relevance": round(c.relevance, 4),
            "age_days": int(c.age_days),
        }
        for c in report.forget_candidates
    ]
    out["alias_candidates"] = [
        {"name": c.name, "entity": c.entity, "entity_id": c.entity_id, "score": round(c.score, 4)}
        for c in report.alias_candidates
    ]
    out["inactive_entities"] = [
        {"name": e.name, "last_reference": e.last_reference, "memories": e.memories}
        for e in report.inactive_entities
    ]
    out["hint"] = REFLECT_HINT
    return out


# ---------------------------------------------------------------------- stats


def _recent(items: list[RecentMemory]) -> list[dict[str, Any]]:
    return [
        {"id": r.id, "type": r.type.value, "summary": r.summary, "age_days": r.age_days}
        for r in items
    ]


def present_stats(result: StatsBrief | StatsDetailed) -> dict[str, Any]:
    attention = result.needs_attention
    needs_attention = {
        "stale_count": attention.stale_count,
        "conflict_count": attention.conflict_count,
        "unvalidated_count": attention.unvalidated_count,
    }
    if not isinstance(result, StatsDetailed):
        brief: dict[str, Any] = {
            "total": result.total,
            "recent": _recent(result.recent),
            "needs_attention": needs_attention,
        }
        if result.warnings:
            brief["warnings"] = result.warnings
        return brief
    detailed: dict[str, Any] = {
        "namespace": result.namespace,
        "total": result.total,
        "counts": result.counts,
        "staleness": result.staleness,
        "superseded": result.superseded,
        "conflicts": result.conflicts,
        "entities": result.entities,
        "storage_mb": _mb(result.storage_bytes),
        "disk_mb": _mb(result.disk_bytes),
        "recent": _recent(result.recent),
        "needs_attention": needs_attention,
        "pinned": result.pinned,
        "evictions": {"total": result.evictions_total, "last_at": result.evictions_last_at},
        "model": result.model,
        "reranker": result.reranker,
        "index": {
            "mode": result.index_mode,
            "reason": result.index_reason,
            "points_all_namespaces": result.index_points,
            **({"sidecar": result.index_sidecar} if result.index_sidecar is not None else {}),
            **(
                {"background_index": result.index_background}
                if result.index_background is not None
                else {}
            ),
        },
        "cache": result.cache,
        "journal_backlog": result.journal_backlog,
    }
    if result.warnings:
        detailed["warnings"] = result.warnings
    return detailed


# ---------------------------------------------------------------------- resources


def present_memory(view: MemoryView) -> dict[str, Any]:
    """One memory as ``ferrex://memory/{id}`` shows it: recall's fields, without a score."""
    memory = view.memory
    item = _memory_fields(memory)
    if memory.type is MemoryType.SEMANTIC:
        if view.effective_confidence is not None:
            item["effective_confidence"] = round(view.effective_confidence, 3)
        item["t_valid"] = to_iso(memory.t_valid) if memory.t_valid else None
        if memory.multi_valued:
            item["multi_valued"] = True
    if memory.t_invalid is not None:
        item["t_invalid"] = to_iso(memory.t_invalid)
        item["superseded_by"] = memory.superseded_by
    item["namespace"] = memory.namespace
    item["entities"] = memory.entities
    item["created_at"] = to_iso(memory.created_at)
    item["freshness"] = view.freshness.to_dict()
    if memory.source:
        item["source"] = memory.source
    if memory.context:
        item["context"] = memory.context
    if memory.pinned:
        item["pinned"] = True
    return item


def present_namespaces(counts: list[NamespaceCounts], default: str) -> dict[str, Any]:
    """``ferrex://namespaces``: every namespace and its counts, and this process's default."""
    return {
        "namespaces": [{"name": c.name, "total": c.total, "by_type": c.by_type} for c in counts],
        "default": default,
    }


def present(tool: str, result: Any) -> dict[str, Any]:
    """The answer of ``tool`` for its use case's result."""
    if tool == "store":
        return present_store(result)
    if tool == "recall":
        return present_recall(result)
    if tool == "forget":
        return present_forget(result)
    if tool == "reflect":
        return present_reflect(result)
    if tool == "stats":
        return present_stats(result)
    raise ValueError(f"no presenter for {tool!r}")
