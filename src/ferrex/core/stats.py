"""The stats tool (spec "stats"): a brief, cheap orientation and a detailed health report.

Brief mode is read at the start of every conversation, so its size is bounded whatever the
store holds: the two most recent memories (as in the spec's example), each summarised in at
most ``SUMMARY_TOKENS`` model tokens of its JSON text: about 170 tokens for the whole brief
answer, 220 with the degraded-mode warnings (measured with the embedding model's tokenizer).

``needs_attention`` counts each current memory once, by the rule ``reflect`` lists them with
(``staleness.review_reasons``), so ``stale_count + unvalidated_count`` is always reflect's
``needs_review_total``: ``stale_count`` (past its stale threshold and not confirmed within its
type's fresh window), ``unvalidated_count`` (not stale, but nobody confirmed it within its
type's fresh window, or a fact whose confidence decayed below 0.5: Layer 5), and
``conflict_count`` (subject + predicate groups with several current values: Layer 4). A
memory confirmed within its fresh window needs no attention even when it is still stale by
age (an old event confirmed stays stale, out of default recalls); the detailed ``staleness``
distribution still counts it as stale.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ferrex.core.attention import count_attention
from ferrex.core.memory import Memory, MemoryType
from ferrex.core.requests import StatsRequest
from ferrex.core.staleness import age_days

if TYPE_CHECKING:
    from ferrex.core.service import MemoryService

RECENT = 2  # as in the spec's example
SUMMARY_CHARS = 80
SUMMARY_TOKENS = 24
ELLIPSIS = "..."

TokenCounter = Callable[[str], int]


def _token_counter(service: MemoryService) -> TokenCounter:
    """Exact model tokens (stats waits for the model, loading at start-up in the background);
    a cheap upper-bound estimate only when the model cannot load at all."""
    embedder = service.embedder
    if getattr(embedder, "loaded", True):
        counter: TokenCounter = getattr(embedder, "count_text_tokens", embedder.count_tokens)
        return lambda text: counter(json.dumps(text))
    return lambda text: len(json.dumps(text)) // 2  # English runs about 4 characters a token


def short_summary(memory: Memory, count_tokens: TokenCounter) -> str:
    """The memory's summary cut to ``SUMMARY_TOKENS`` (counted on its JSON text).

    Cut at a word boundary; a first word too long on its own is cut by characters.
    """
    full = memory.summary(SUMMARY_CHARS)
    text = full.removesuffix("\u2026")
    if text == full and count_tokens(text) <= SUMMARY_TOKENS:
        return text
    words = text.split()
    while len(words) > 1:
        candidate = " ".join(words) + ELLIPSIS
        if count_tokens(candidate) <= SUMMARY_TOKENS:
            return candidate
        words.pop()
    head = words[0] if words else ""
    while head:
        candidate = head + ELLIPSIS
        if count_tokens(candidate) <= SUMMARY_TOKENS:
            return candidate
        head = head[:-1]
    return ELLIPSIS


def _recent(
    memories: list[Memory], now: datetime, count_tokens: TokenCounter
) -> list[dict[str, Any]]:
    return [
        {
            "id": m.id,
            "type": m.type.value,
            "summary": short_summary(m, count_tokens),
            "age_days": int(age_days(m, now)),
        }
        for m in memories
    ]


def stats(service: MemoryService, request: StatsRequest) -> dict[str, Any]:
    namespace = request.namespace or service.namespace
    meta = service.meta
    now = service.now()
    counts = meta.memory_counts(namespace)
    total = sum(c.n for c in counts)
    current_total = sum(c.n for c in counts if c.current)
    attention = count_attention(meta, namespace, now, service.settings.staleness)
    levels = attention.levels
    conflict_count = meta.count_contradictions(namespace)
    recent = meta.recent_memories(namespace, RECENT)
    needs_attention = {
        "stale_count": attention.stale,
        "conflict_count": conflict_count,
        "unvalidated_count": attention.unvalidated,
    }
    warnings = service.warnings(brief=not request.detailed)
    count_tokens = _token_counter(service)
    if not request.detailed:
        brief: dict[str, Any] = {
            "total": total,
            "recent": _recent(recent, now, count_tokens),
            "needs_attention": needs_attention,
        }
        if warnings:
            brief["warnings"] = warnings
        return brief
    by_type = {t.value: 0 for t in MemoryType}
    for count in counts:
        by_type[count.type] = by_type.get(count.type, 0) + count.n
    storage = service.storage_bytes()
    index_stats = service.index.stats()
    # The model in use, or (while it loads, or when it was refused) the store's pinned model.
    usable = getattr(service.embedder, "loaded", True) and service.model_error is None
    model = service.embedder.info if usable else None
    detailed: dict[str, Any] = {
        "namespace": namespace,
        "total": total,
        "counts": by_type,
        "staleness": {"fresh": levels["fresh"], "aging": levels["aging"], "stale": levels["stale"]},
        "superseded": total - current_total,
        "conflicts": conflict_count,
        "entities": meta.count_entities(namespace),
        "storage_mb": round(storage / (1024 * 1024), 2),
        "disk_mb": round(service.disk_bytes() / (1024 * 1024), 2),
        "recent": _recent(recent, now, count_tokens),
        "needs_attention": needs_attention,
        "pinned": sum(c.n for c in counts if c.pinned),
        "evictions": {
            "total": meta.count_audit(namespace, "evict"),
            "last_at": meta.last_audit_at(namespace, "evict"),
        },
        "model": _model_status(service, model),
        "reranker": {
            "enabled": service.settings.rerank,
            "available": service.reranker.available,
            "model": service.reranker.name,
            "reason": service.reranker.unavailable_reason
            or (
                "not loaded yet (checked in the background at start-up)"
                if service.settings.rerank and not service.reranker.available
                else None
            ),
        },
        "index": {
            "mode": index_stats.mode,
            "reason": index_stats.reason or None,
            "points_all_namespaces": index_stats.points,
            **(
                {"sidecar": index_stats.details["sidecar"]}
                if "sidecar" in index_stats.details
                else {}
            ),
            **(
                {"background_index": index_stats.details["background_index"]}
                if "background_index" in index_stats.details
                else {}
            ),
        },
        "cache": service.cache.stats(),
        "journal_backlog": meta.journal_backlog(),
    }
    if warnings:
        detailed["warnings"] = warnings
    return detailed


def _model_status(service: MemoryService, model: Any) -> dict[str, Any] | None:
    """The loaded model, or (while it loads) the model the store is pinned to."""
    if model is not None:
        return {
            "name": model.name,
            "dimension": model.dimension,
            "source": model.source,
            "variant": model.variant,
            "loaded": True,
        }
    from ferrex.core.service import PIN_DIMENSION, PIN_NAME, PIN_SOURCE, PIN_VARIANT

    meta = service.meta
    name = meta.get_meta(PIN_NAME)
    if name is None:
        return None
    return {
        "name": name,
        "dimension": int(meta.get_meta(PIN_DIMENSION) or 0) or None,
        "source": meta.get_meta(PIN_SOURCE),
        "variant": meta.get_meta(PIN_VARIANT),
        "loaded": False,
    }
