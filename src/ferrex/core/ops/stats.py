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
from typing import Any

from ferrex.core.deps import Deps
from ferrex.core.index.pins import PIN_DIMENSION, PIN_NAME, PIN_SOURCE, PIN_VARIANT
from ferrex.core.lifecycle.attention import count_attention
from ferrex.core.lifecycle.staleness import age_days
from ferrex.core.lifecycle.upkeep import Upkeep
from ferrex.core.memory import Memory, MemoryType
from ferrex.core.ops.readiness import Readiness
from ferrex.core.requests import StatsRequest
from ferrex.core.results import Attention, RecentMemory, StatsBrief, StatsDetailed

RECENT = 2  # as in the spec's example
SUMMARY_CHARS = 80
SUMMARY_TOKENS = 24
ELLIPSIS = "..."

TokenCounter = Callable[[str], int]


def _token_counter(service: Deps) -> TokenCounter:
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
) -> list[RecentMemory]:
    return [
        RecentMemory(m.id, m.type, short_summary(m, count_tokens), int(age_days(m, now)))
        for m in memories
    ]


class Stats:
    """The stats use case."""

    def __init__(self, deps: Deps, upkeep: Upkeep, readiness: Readiness) -> None:
        self.deps = deps
        self.upkeep = upkeep
        self.readiness = readiness

    def run(self, request: StatsRequest) -> StatsBrief | StatsDetailed:
        deps = self.deps
        self.readiness.try_ready()
        deps.sync_external_writes()
        namespace = request.namespace or deps.namespace
        meta = deps.meta
        now = deps.now()
        counts = meta.memory_counts(namespace)
        total = sum(c.n for c in counts)
        current_total = sum(c.n for c in counts if c.current)
        counted = count_attention(meta, namespace, now, deps.settings.staleness)
        levels = counted.levels
        conflict_count = meta.count_contradictions(namespace)
        latest = meta.recent_memories(namespace, RECENT)
        attention = Attention(counted.stale, conflict_count, counted.unvalidated)
        warnings = self.readiness.warnings(brief=not request.detailed)
        low_disk = self.upkeep.low_disk_warning(brief=not request.detailed)
        if low_disk is not None:
            warnings = [*warnings, low_disk]
        recent = _recent(latest, now, _token_counter(deps))
        if not request.detailed:
            return StatsBrief(total, recent, attention, warnings)
        by_type = {t.value: 0 for t in MemoryType}
        for count in counts:
            by_type[count.type] = by_type.get(count.type, 0) + count.n
        index_stats = deps.index.stats()
        # The model in use, or (while it loads, or when it was refused) the store's pinned model.
        usable = getattr(deps.embedder, "loaded", True) and self.readiness.model_error is None
        reranker = deps.reranker
        return StatsDetailed(
            total=total,
            recent=recent,
            needs_attention=attention,
            warnings=warnings,
            namespace=namespace,
            counts=by_type,
            staleness={k: levels[k] for k in ("fresh", "aging", "stale")},
            superseded=total - current_total,
            conflicts=conflict_count,
            entities=meta.count_entities(namespace),
            storage_bytes=self.upkeep.storage_bytes(),
            disk_bytes=self.upkeep.disk_bytes(),
            free_bytes=self.upkeep.free_bytes(),
            pinned=sum(c.n for c in counts if c.pinned),
            evictions_total=meta.count_audit(namespace, "evict"),
            evictions_last_at=meta.last_audit_at(namespace, "evict"),
            model=_model_status(deps, deps.embedder.info if usable else None),
            reranker={
                "enabled": deps.settings.rerank,
                "available": reranker.available,
                "model": reranker.name,
                "reason": reranker.unavailable_reason
                or (
                    "not loaded yet (a server checks it in the background at start-up; "
                    "a recall loads it)"
                    if deps.settings.rerank and not reranker.available
                    else None
                ),
            },
            index_mode=index_stats.mode,
            index_reason=index_stats.reason or None,
            index_points=index_stats.points,
            index_sidecar=index_stats.details.get("sidecar"),
            index_background=index_stats.details.get("background_index"),
            index_limitations=list(index_stats.details.get("limitations") or []),
            late_interaction=_late_status(deps, index_stats.details),
            cache=deps.cache.stats(),
            journal_backlog=meta.journal_backlog(),
        )


def _late_status(deps: Deps, details: dict[str, Any]) -> dict[str, Any]:
    """Whether recall scores by late interaction, and what to do when it cannot."""
    enabled = deps.settings.retrieval.late_interaction.enabled
    present = deps.index.late_interaction
    status: dict[str, Any] = {"enabled": enabled, "in_index": present}
    if present and details.get("tokens_datatype"):
        status["datatype"] = details["tokens_datatype"]  # a server's; the embedded: 8-bit
    lacking = [what for what in details.get("limitations", []) if "multivector" in what]
    if enabled and not present:
        status["hint"] = (
            lacking[0]
            if lacking
            else "the index was built without the late-interaction channel: `ferrex rebuild-index` "
            "adds it (recall works without it meanwhile)"
        )
    return status


def _model_status(deps: Deps, model: Any) -> dict[str, Any] | None:
    """The loaded model, or (while it loads) the model the store is pinned to."""
    if model is not None:
        return {
            "name": model.name,
            "dimension": model.dimension,
            "source": model.source,
            "variant": model.variant,
            "loaded": True,
        }
    meta = deps.meta
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
