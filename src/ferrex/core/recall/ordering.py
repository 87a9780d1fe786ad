"""The page's order: the cross-encoder over the first candidates (its scores kept with the cache
entry), the recency boost, and ``order_candidates`` (core/recall/formulas.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import cast

from ferrex.config.core import CoreSettings
from ferrex.core.clock import days_between
from ferrex.core.deps import Deps
from ferrex.core.lifecycle.staleness import age_days
from ferrex.core.memory import Memory, MemoryType
from ferrex.core.recall.formulas import Candidate, order_candidates, recency_boost
from ferrex.core.recall.records import Retrieved
from ferrex.core.recall.relevance import max_boost

Rerank = Callable[[Sequence[Candidate]], list[float]]
Boost = Callable[[Candidate], float]


def cross_encoder(deps: Deps) -> bool:
    """Whether the cross-encoder orders the first candidates (loaded now if configured and not
    loaded yet)."""
    if deps.settings.rerank and not deps.reranker.available:
        deps.reranker.load()
    return deps.reranker.available and deps.settings.retrieval.rerank_top_n > 0


def reranker(deps: Deps, query: str, rows: dict[str, Memory], retrieved: Retrieved) -> Rerank:
    """The cross-encoder's scores of candidates, each asked once per cache entry."""

    def rerank(head: Sequence[Candidate]) -> list[float]:
        records = retrieved.by_id
        missing = [c for c in head if records[c.memory_id].rerank_score is None]
        if missing:
            scores = deps.reranker.score(query, [rows[c.memory_id].display_text() for c in missing])
            for candidate, score in zip(missing, scores, strict=True):
                records[candidate.memory_id].rerank_score = score
        return [cast(float, records[c.memory_id].rerank_score) for c in head]

    return rerank


def boost_age_days(memory: Memory, now: datetime) -> float:
    """The age the recency boost sees: an event's from when it happened (its ``timestamp``;
    stored today, last year's event is a year old), anything else's from when it was stored.
    (Staleness counts from creation for every type: core/lifecycle/staleness.py.)"""
    if memory.type is MemoryType.EPISODIC:
        return days_between(memory.event_time, now)
    return age_days(memory, now)


def booster(settings: CoreSettings, rows: dict[str, Memory], now: datetime) -> Boost:
    """A candidate's recency boost."""

    def boost(candidate: Candidate) -> float:
        memory = rows[candidate.memory_id]
        return recency_boost(memory.type, boost_age_days(memory, now), settings.recency)

    return boost


def order(
    settings: CoreSettings,
    candidates: Sequence[Candidate],
    *,
    rerank: Rerank | None,
    rerank_top_n: int,
    boost: Boost,
    floor: float,
) -> tuple[list[Candidate], str]:
    """The candidates in the page's order (those under the floor dropped), and the score
    basis."""
    cfg = settings.retrieval
    return order_candidates(
        candidates,
        rerank_top_n=rerank_top_n,
        rerank=rerank,
        boost_of=boost,
        base_k=cfg.fused_base_k,
        max_boost=max_boost(settings.recency),
        min_score=floor,
        by_relevance=cfg.mode == "hybrid" and cfg.fusion == "relevance",
        margin=cfg.recency_margin,
    )
