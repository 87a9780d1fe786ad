"""What the agent reads: typed core results turned into tool answers (structured content).

The one place that decides the shape of every answer; core returns results
(``core/results.py``) and never builds answer dicts.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
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

_FRACTION = re.compile(r"(?<=:\d\d)\.\d+")  # stored text timestamps: cut to the second
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


def iso(moment: datetime | None) -> str | None:
    """A timestamp to the second (RFC 3339, UTC)."""
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(value: Any) -> Any:
    """A stored ISO timestamp (text) cut to the second."""
    if isinstance(value, str):
        return _FRACTION.sub("", value)
    return iso(value) if isinstance(value, datetime) else value


def _mb(size: int) -> float:
    return round(size / (1024 * 1024), 2)


# ---------------------------------------------------------------------- store


def _store_message(outcome: StoreOutcome) -> str | None:
    """One sentence for the outcomes that need the agent's attention or explain a refusal."""
    if outcome.status is Outcome.ENDED:
        return "the current fact ended at t_invalid; it is history now"
    if outcome.status is Outcome.DUPLICATE:
        if outcome.confirmed:
            return "already known: confirmed (last_validated) instead of stored twice"
        return "already known for that time; nothing was stored"
    if outcome.status is Outcome.HISTORICAL:
        if outcome.superseded_by is not None:
            return "a newer value is current; stored as history"
        return "stored as history (true from t_valid until t_invalid)"
    if outcome.status is Outcome.CONTRADICTION:
        return (
            "a current fact with higher confidence says otherwise; both kept and flagged: "
            "resolve with store(supersedes=...) or forget"
        )
    return None


def present_store(outcome: StoreOutcome) -> dict[str, Any]:
    """id, type, status and what the store changed (the other memories it names)."""
    out: dict[str, Any] = {
        "id": outcome.id,
        "type": outcome.type.value,
        "status": outcome.status.value,
    }
    if outcome.t_invalid is not None:
        out["t_invalid"] = iso(outcome.t_invalid)
    if outcome.superseded:
        out["superseded"] = outcome.superseded
    if outcome.superseded_by is not None:
        out["superseded_by"] = outcome.superseded_by
    if outcome.multi_valued:
        out["multi_valued"] = True  # one of several current values (also_current: the others)
    if outcome.also_current:
        out["also_current"] = outcome.also_current
    if outcome.contradicts:
        out["contradicts"] = outcome.contradicts
    if outcome.validated:
        out["validated"] = outcome.validated
    if outcome.version is not None:
        out["version"] = outcome.version
    if outcome.previous_version_id is not None:
        out["previous_version"] = {
            "id": outcome.previous_version_id,
            "version": outcome.previous_version,
        }
    if outcome.rolled_back_to is not None:
        out["rolled_back_to"] = outcome.rolled_back_to
    if outcome.possible_alias:  # current facts kept beside this one: the agent decides
        out["possible_alias"] = [_possible_alias(a) for a in outcome.possible_alias]
    if outcome.evicted:
        out["evicted"] = outcome.evicted
    message = _store_message(outcome)
    if message:
        out["message"] = message
    if outcome.warnings:
        out["warnings"] = outcome.warnings
    if outcome.redacted:  # what was taken out, never the value
        out["redacted"] = [r.to_dict() for r in outcome.redacted]
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


# An episode's own time is shown when it was given at store (an event from the past), not when
# it is the time ferrex learnt it (that is freshness.age_days).
EVENT_TIME_SHOWN_AFTER_SECONDS = 60


def _freshness(hit: RecallHit) -> dict[str, Any]:
    memory = hit.memory
    return {
        "age_days": hit.freshness.age_days,
        "last_accessed": iso(memory.last_accessed),
        "last_validated": iso(memory.last_validated),
        "access_count": memory.access_count,
        "staleness": hit.freshness.staleness,
    }


def _details(hit: RecallHit) -> dict[str, Any]:
    """Everything else known about the memory (``explain: true``)."""
    memory = hit.memory
    details: dict[str, Any] = {"created_at": iso(memory.created_at), "entities": memory.entities}
    if memory.type is MemoryType.SEMANTIC:
        details.update(subject=memory.subject, predicate=memory.predicate, object=memory.object)
        details["confidence"] = memory.confidence
        if hit.effective_confidence is not None:
            details["effective_confidence"] = round(hit.effective_confidence, 3)
        details["t_valid"] = iso(memory.t_valid)
        if memory.multi_valued:
            details["multi_valued"] = True
    elif memory.type is MemoryType.PROCEDURAL:
        if memory.name:
            details["name"] = memory.name
        if memory.conditions:
            details["conditions"] = memory.conditions
        if memory.steps:
            details["steps"] = memory.steps
    else:
        details["timestamp"] = iso(memory.event_time)
    if memory.source:
        details["source"] = memory.source
    if memory.context:
        details["context"] = memory.context
    if memory.pinned:
        details["pinned"] = True
    return details


def _score(score: float) -> float:
    """Four decimals, rounded down: never above the relevance explain shows, order kept."""
    return math.floor(score * 10_000) / 10_000


def present_hit(hit: RecallHit) -> dict[str, Any]:
    """The design's result (id, type, content, score, freshness) plus what the agent acts on
    for this result: a contradiction and its partners, a past fact's validity interval, a
    procedure's version, a past event's time."""
    memory = hit.memory
    item: dict[str, Any] = {
        "id": memory.id,
        "type": memory.type.value,
        "content": memory.display_text(),
        "score": _score(hit.score),
        "freshness": _freshness(hit),
    }
    if memory.type is MemoryType.EPISODIC:
        if abs((memory.event_time - memory.created_at).total_seconds()) > (
            EVENT_TIME_SHOWN_AFTER_SECONDS
        ):
            item["timestamp"] = iso(memory.event_time)
    elif memory.type is MemoryType.PROCEDURAL and memory.version is not None:
        item["version"] = memory.version
    if memory.t_invalid is not None:  # history: when it was true, and what replaced it
        item["t_valid"] = iso(memory.t_valid or memory.event_time)
        item["t_invalid"] = iso(memory.t_invalid)
        if memory.superseded_by:
            item["superseded_by"] = memory.superseded_by
    if hit.contradicts:
        item["contradiction"] = True
        item["contradicts"] = hit.contradicts
    if hit.included_as:  # not found by the query itself: a contradiction partner, a neighbour
        item["included_as"] = hit.included_as
    if hit.explain is not None:
        item["explain"] = {**hit.explain, **_details(hit)}
    return item


def present_recall(result: RecallResult) -> dict[str, Any]:
    out: dict[str, Any] = {"results": [present_hit(hit) for hit in result.hits]}
    if result.stale_held_back:
        out["stale_held_back"] = result.stale_held_back
    if result.no_results is not None:  # an empty answer says so, once
        out["no_results"] = result.no_results
    if result.truncated is not None:
        out["truncated"] = result.truncated
        out["tokens"] = result.tokens
    if result.unresolved_entities:
        out["unresolved_entities"] = result.unresolved_entities
    if result.cache_hit is not None:  # explain: what applies to the whole answer
        out["explain"] = {
            "namespace": result.namespace,
            "score_basis": result.score_basis,
            "reranked": result.reranked,
            "rerank_status": result.rerank_status,
            "cache_hit": result.cache_hit,
        }
    return out


# ---------------------------------------------------------------------- forget


def present_forget(result: ForgetResult) -> dict[str, Any]:
    out: dict[str, Any] = {"deleted": result.deleted, "not_found": result.not_found}
    if result.entities_removed:
        out["entities_removed"] = result.entities_removed
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
                "facts": [
                    {
                        "id": f.id,
                        "object": f.object,
                        "confidence": f.confidence,
                        "t_valid": iso(f.t_valid),
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
        {"name": e.name, "last_reference": _seconds(e.last_reference), "memories": e.memories}
        for e in report.inactive_entities
    ]
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
        "evictions": {
            "total": result.evictions_total,
            "last_at": _seconds(result.evictions_last_at),
        },
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
            **({"limitations": result.index_limitations} if result.index_limitations else {}),
            "late_interaction": result.late_interaction,
        },
        "cache": result.cache,
        "journal_backlog": result.journal_backlog,
    }
    if result.free_bytes is not None:  # free space on the disk holding the store
        detailed["free_mb"] = _mb(result.free_bytes)
    if result.warnings:
        detailed["warnings"] = result.warnings
    return detailed


# ---------------------------------------------------------------------- resources


def _memory_fields(memory: Memory) -> dict[str, Any]:
    """A memory's own fields (the memory resource shows them all)."""
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
