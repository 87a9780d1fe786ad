"""The stats tool (spec "stats"): a brief, cheap orientation and a detailed health report."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from ferrex.core.memory import Memory, MemoryType
from ferrex.core.requests import StatsRequest
from ferrex.core.staleness import FRESH, STALE, assess

if TYPE_CHECKING:
    from ferrex.core.service import MemoryService

RECENT = 5
SUMMARY_CHARS = 60


def _recent(memories: list[Memory], now: Any) -> list[dict[str, Any]]:
    from ferrex.core.staleness import age_days

    return [
        {
            "id": m.id,
            "type": m.type.value,
            "summary": m.summary(SUMMARY_CHARS),
            "age_days": int(age_days(m, now)),
        }
        for m in memories
    ]


def stats(service: MemoryService, request: StatsRequest) -> dict[str, Any]:
    namespace = request.namespace or service.namespace
    meta = service.meta
    now = service.now()
    memories = meta.memories_in_namespace(namespace, order="created_at DESC, id DESC")
    current = [m for m in memories if m.t_invalid is None]
    levels: Counter[str] = Counter()
    unvalidated = 0
    for memory in current:
        level = assess(memory, now, service.settings.staleness).staleness
        levels[level] += 1
        if memory.last_validated is None and level != FRESH:
            unvalidated += 1
    conflict_count = meta.count_contradictions(namespace)
    recent = sorted(current, key=lambda m: (m.created_at, m.id), reverse=True)[:RECENT]
    needs_attention = {
        "stale_count": levels[STALE],
        "conflict_count": conflict_count,
        "unvalidated_count": unvalidated,
    }
    warnings = service.warnings()
    if not request.detailed:
        brief: dict[str, Any] = {
            "total": len(memories),
            "recent": _recent(recent, now),
            "needs_attention": needs_attention,
        }
        if warnings:
            brief["warnings"] = [w.split(";")[0][:120] for w in warnings]
        return brief
    counts = {t.value: 0 for t in MemoryType}
    counts.update(Counter(m.type.value for m in memories))
    storage = service.storage_bytes()
    index_stats = service.index.stats()
    model = service.embedder.info if getattr(service.embedder, "loaded", True) else None
    detailed: dict[str, Any] = {
        "namespace": namespace,
        "total": len(memories),
        "counts": counts,
        "staleness": {"fresh": levels["fresh"], "aging": levels["aging"], "stale": levels["stale"]},
        "superseded": len(memories) - len(current),
        "conflicts": conflict_count,
        "entities": meta.count_entities(namespace),
        "storage_mb": round(storage / (1024 * 1024), 2),
        "recent": _recent(recent, now),
        "needs_attention": needs_attention,
        "pinned": sum(1 for m in memories if m.pinned),
        "evictions": {
            "total": meta.count_audit(namespace, "evict"),
            "last_at": meta.last_audit_at(namespace, "evict"),
        },
        "model": None
        if model is None
        else {
            "name": model.name,
            "dimension": model.dimension,
            "source": model.source,
            "variant": model.variant,
        },
        "reranker": {
            "enabled": service.settings.rerank,
            "available": service.reranker.available,
            "model": service.reranker.name,
            "reason": service.reranker.unavailable_reason,
        },
        "index": {"mode": index_stats.mode, "points": index_stats.points},
        "cache": service.cache.stats(),
        "journal_backlog": meta.journal_backlog(),
    }
    if warnings:
        detailed["warnings"] = warnings
    return detailed
