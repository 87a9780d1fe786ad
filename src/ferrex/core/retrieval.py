"""Retrieval scoring (spec "Retrieval Pipeline Detail", step 3): rerank, recency boost, order.

    final_score = base_score x recency_boost            (multiplicative, never additive)
    recency_boost = 1 + amplitude x 2^(-age_days / half_life_days)
        episodic   1 + 0.3  x 2^(-age/30)    (1.0 - 1.3)
        semantic   1 + 0.15 x 2^(-age/180)   (1.0 - 1.15)
        procedural 1.0

``base_score`` is the cross-encoder's relevance as a probability (sigmoid of its raw logit, so
the multiplicative boost keeps its meaning for negative logits) when the reranker ran.
Without a reranker it is a rank score of the fused order, ``(b + 1) / (b + rank)`` with
``b = retrieval.fused_base_k`` (default 5): 1.0 for the first candidate, 0.86 for the second,
0.6 for the fifth. The raw RRF score (k = 60) is far too flat for a multiplicative boost: ranks
1 and 2 differ by under 2%, so a 15-30% recency boost would override relevance entirely (golden
set recall@3 fell from 0.875 to 0.719 when we tried it). With ``b`` = 5 a maximal boost lifts a
memory one or two places. Responses name the basis used (``score_basis``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ferrex.config import RecencyConfig
from ferrex.core.memory import MemoryType
from ferrex.core.ports import IndexHit

BASIS_RERANK = "rerank"
BASIS_FUSED = "fused"


def recency_boost(memory_type: MemoryType | str, age_days: float, config: RecencyConfig) -> float:
    curve = getattr(config, MemoryType(memory_type).value)
    if curve.amplitude == 0 or curve.half_life_days <= 0:
        return 1.0
    return 1.0 + curve.amplitude * 2.0 ** (-max(0.0, age_days) / curve.half_life_days)


def rerank_probability(raw_score: float) -> float:
    """Cross-encoder logit -> (0, 1)."""
    if raw_score >= 0:
        return 1.0 / (1.0 + math.exp(-raw_score))
    exp = math.exp(raw_score)
    return exp / (1.0 + exp)


def normalised_rrf(score: float, rrf_k: int, channels: int = 2) -> float:
    best = channels / (rrf_k + 1.0)
    return min(1.0, score / best) if best > 0 else 0.0


@dataclass
class Candidate:
    """One memory in the recall pipeline, from fusion to final order."""

    memory_id: str
    fused_score: float
    fused_rank: int
    dense_rank: int | None = None
    bm25_rank: int | None = None
    rerank_score: float | None = None
    base_score: float = 0.0
    boost: float = 1.0
    final_score: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def explain(self) -> dict[str, Any]:
        return {
            "dense_rank": self.dense_rank,
            "bm25_rank": self.bm25_rank,
            "fused_rank": self.fused_rank,
            "fused_score": round(self.fused_score, 6),
            "rerank_score": None if self.rerank_score is None else round(self.rerank_score, 6),
            "base_score": round(self.base_score, 6),
            "recency_boost": round(self.boost, 6),
            "final_score": round(self.final_score, 6),
            **self.extra,
        }


def rank_score(rank: int, base_k: float) -> float:
    """Fused-order base score: (b + 1) / (b + rank), 1.0 at rank 1."""
    return (base_k + 1.0) / (base_k + max(1, rank))


def order_candidates(
    candidates: Sequence[Candidate],
    *,
    rerank_top_n: int,
    rerank: Callable[[Sequence[Candidate]], list[float]] | None,
    boost_of: Callable[[Candidate], float],
    base_k: float,
) -> tuple[list[Candidate], str]:
    """Rerank the top-N fused candidates, apply boosts, keep RRF order for the rest.

    ``candidates`` arrive in fused order. Returns the final order and the score basis.

    Without a reranker every candidate scores ``rank_score(fused_rank) x boost`` (the fused rank
    counts every candidate the index returned, so a memory's score does not depend on whether
    stale ones were held back). With one, the reranked head scores ``p(relevant) x boost``; the
    tail keeps its fused order (spec: rerank the top N, RRF order for the rest) and scores
    strictly below the head's lowest score, decreasing with position, with no boost applied —
    so ``score`` never rises down a page.
    """
    head = list(candidates[:rerank_top_n]) if rerank is not None else []
    tail = list(candidates[len(head) :])
    if head and rerank is not None:
        raw = rerank(head)
        for candidate, score in zip(head, raw, strict=True):
            candidate.rerank_score = float(score)
            candidate.base_score = rerank_probability(float(score))
            candidate.boost = boost_of(candidate)
            candidate.final_score = candidate.base_score * candidate.boost
        head.sort(key=lambda c: (-c.final_score, c.memory_id))
        floor = head[-1].final_score
        for position, candidate in enumerate(tail, start=1):
            candidate.rerank_score = None
            candidate.base_score = floor * rank_score(position + 1, base_k)
            candidate.boost = 1.0
            candidate.final_score = candidate.base_score
        return head + tail, BASIS_RERANK
    for candidate in candidates:
        candidate.rerank_score = None
        candidate.base_score = rank_score(candidate.fused_rank, base_k)
        candidate.boost = boost_of(candidate)
        candidate.final_score = candidate.base_score * candidate.boost
    ordered = sorted(candidates, key=lambda c: (-c.final_score, c.fused_rank, c.memory_id))
    return ordered, BASIS_FUSED


def fit_budget(
    texts: Sequence[str], count_tokens: Callable[[str], int], max_tokens: int
) -> tuple[int, int]:
    """How many leading results fit in ``max_tokens`` (cut, never split) and the tokens used."""
    used = 0
    for index, text in enumerate(texts):
        cost = count_tokens(text)
        if used + cost > max_tokens:
            return index, used
        used += cost
    return len(texts), used


def hit_order(hit: IndexHit) -> tuple[float, str, int, str]:
    """Score first, then memory id: engines order equal scores by storage position, which
    differs between a store and its rebuild or import (exact ties are common in BM25)."""
    return (-hit.score, hit.memory_id, hit.chunk, hit.point_id)


def fuse_rrf(channels: Sequence[Sequence[IndexHit]], rrf_k: int, limit: int) -> list[IndexHit]:
    """Reciprocal-rank fusion of ranked channels of memories, deterministic under ties.

    Same formula as Qdrant's ``Fusion.Rrf``: each memory scores ``sum 1 / (k + position)`` over
    the channels it appears in, position counted from 0. Channels hold one hit per memory (see
    ``best_chunk_per_memory``), so a chunked procedure whose best dense and best BM25 chunks
    differ still gets both channels' credit. Each channel is put in ``hit_order`` before
    positions are assigned, and the fused list is ordered the same way. (The engine's own fusion
    orders exact channel ties by storage position, which moves when a payload is updated, so a
    store and its rebuild or import would rank differently.)
    """
    fused: dict[str, float] = {}
    first: dict[str, IndexHit] = {}
    for hits in channels:
        for position, hit in enumerate(sorted(hits, key=hit_order)):
            key = hit.memory_id or hit.point_id
            fused[key] = fused.get(key, 0.0) + 1.0 / (rrf_k + position)
            first.setdefault(key, hit)
    out = [
        IndexHit(hit.point_id, hit.memory_id, fused[key], hit.chunk) for key, hit in first.items()
    ]
    out.sort(key=hit_order)
    return out[:limit]


def best_chunk_per_memory(hits: Sequence[IndexHit], limit: int) -> list[IndexHit]:
    """A channel's hits with one hit per memory (its best chunk), at most ``limit`` memories.

    A long procedure is indexed as one point per step; without this its steps would fill a
    channel's prefetch and push every other memory out of the candidates (spec, Chunking:
    "Qdrant returns the best-matching chunk. ferrex deduplicates by memory_id")."""
    seen: set[str] = set()
    out: list[IndexHit] = []
    for hit in sorted(hits, key=hit_order):
        if hit.memory_id in seen:
            continue
        seen.add(hit.memory_id)
        out.append(hit)
        if len(out) == limit:
            break
    return out


def needs_deeper_fetch(hits: Sequence[IndexHit], fetched: int, wanted: int) -> bool:
    """True when a full page of chunk hits named fewer than ``wanted`` distinct memories."""
    return len(hits) >= fetched and len({hit.memory_id for hit in hits}) < wanted


def apply_relative_floor(hits: Sequence[IndexHit], fraction: float) -> list[IndexHit]:
    """Drop channel hits scoring below ``fraction`` of the channel's best score.

    Used on the BM25 channel before fusion: RRF only sees ranks, so a crowd of weak lexical
    matches (a name every memory starts with, a common word) would earn real fused credit and
    push genuine single-channel hits out of the top results. Measured in bench/RESULTS.md.
    """
    if fraction <= 0 or not hits:
        return list(hits)
    best = max(hit.score for hit in hits)
    if best <= 0:
        return list(hits)
    return [hit for hit in hits if hit.score >= fraction * best]
