"""Retrieval scoring (spec "Retrieval Pipeline Detail", step 3): rerank, boost, floor, order.

    key         = logit(base_score) + margin x ln(recency_boost) / ln(max_boost)
    final_score = sigmoid(key - margin)                  (margin = retrieval.recency_margin)
    recency_boost = 1 + amplitude x 2^(-age_days / half_life_days)
        episodic   1 + 0.3  x 2^(-age/30)    (1.0 - 1.3; age from the event's timestamp)
        semantic   1 + 0.15 x 2^(-age/180)   (1.0 - 1.15)
        procedural 1.0

``base_score`` is the cross-encoder's relevance as a probability (sigmoid of its raw logit) when
the reranker ran; without one it is the calibrated relevance of core/recall/relevance.py, never a
function of the rank. The boost keeps the spec's curves but moves a candidate at most ``margin``
logits, so two candidates whose evidence clearly differs are never reordered by age (a
departure from the spec's product, docs/design.md); every score is in [0, 1] and never rises
down a page. Candidates whose base score is below ``retrieval.min_score`` are not returned.
With ``retrieval.fusion = "rrf"`` the design's order stays: ``rank_score x boost``. Responses
name the basis used (``score_basis``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ferrex.config.recall import RecencyConfig
from ferrex.core.memory import MemoryType
from ferrex.core.ports import IndexHit

BASIS_RERANK = "rerank"
BASIS_FUSED = "fused"


def recency_boost(memory_type: MemoryType | str, age_days: float, config: RecencyConfig) -> float:
    curve = getattr(config, MemoryType(memory_type).value)
    if curve.amplitude == 0 or curve.half_life_days <= 0:
        return 1.0
    return 1.0 + curve.amplitude * 2.0 ** (-max(0.0, age_days) / curve.half_life_days)


def sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    exp = math.exp(x)
    return exp / (1.0 + exp)


def rerank_probability(raw_score: float) -> float:
    """Cross-encoder logit -> (0, 1)."""
    return sigmoid(raw_score)


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
    # Calibrated relevance from the channels' evidence (core/recall/relevance.py), before any boost.
    relevance: float = 0.0
    # What the floor judges when it is not the base score: with late interaction, the
    # two-channel relevance the floor was chosen on (None: the base score).
    floor_basis: float | None = None
    # Where it stands on the page (``order_key``): higher first.
    key: float = 0.0
    # The hit whose context credit raised its relevance (core/recall/context.py), if any.
    context_of: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def explain(self) -> dict[str, Any]:
        return {
            "dense_rank": self.dense_rank,
            "bm25_rank": self.bm25_rank,
            "fused_rank": self.fused_rank,
            "fused_score": round(self.fused_score, 6),
            "relevance": round(self.relevance, 6),
            "rerank_score": None if self.rerank_score is None else round(self.rerank_score, 6),
            "base_score": round(self.base_score, 6),
            "recency_boost": round(self.boost, 6),
            "final_score": round(self.final_score, 6),
            **self.extra,
        }


def _floor_value(candidate: Candidate) -> float:
    """What the floor compares for a candidate the cross-encoder did not score."""
    return candidate.base_score if candidate.floor_basis is None else candidate.floor_basis


def rank_score(rank: int, base_k: float) -> float:
    """Fused-order rank score: (b + 1) / (b + rank), 1.0 at rank 1 (orders RRF fusion)."""
    return (base_k + 1.0) / (base_k + max(1, rank))


def logit(probability: float) -> float:
    """The log-odds of a probability (clamped away from 0 and 1, where it is infinite)."""
    p = min(max(probability, 1e-12), 1.0 - 1e-12)
    return math.log(p / (1.0 - p))


def recency_shift(boost: float, max_boost: float, margin: float) -> float:
    """How far, in logits, a recency ``boost`` moves a candidate: ``margin x ln(boost) /
    ln(max_boost)``, from 0 (no boost) to ``margin`` (the largest boost any type can get)."""
    if margin <= 0 or max_boost <= 1.0 or boost <= 1.0:
        return 0.0
    return margin * min(1.0, math.log(boost) / math.log(max_boost))


def order_key(base: float, boost: float, max_boost: float, margin: float) -> float:
    """Where a candidate of base score ``base`` (a probability) and recency ``boost`` stands:
    its log-odds plus the boost's shift. Candidates whose log-odds differ by more than
    ``margin`` are never reordered by age; within it, the higher key comes first."""
    return logit(base) + recency_shift(boost, max_boost, margin)


def shown_score(key: float, margin: float) -> float:
    """The score an answer shows for an order key: the base score for a candidate with the
    largest boost, less (at most ``margin`` logits) for a smaller one (older, or a type the
    design boosts less: a procedure always shows ``margin`` less); monotone in the key, so
    scores never rise down a page, and in [0, 1] for every type."""
    return sigmoid(key - margin)


def cap_context(candidates: Sequence[Candidate], margin: float) -> None:
    """A context neighbour never stands above the hit it is context of (docs/recall.md): its
    key is at most its hit's — after that hit's own cap, along a chain of neighbours — and it
    comes after the hit at a tie. (Credit only flows to memories less relevant than their hit,
    so a chain never closes on itself.)"""
    by_id = {c.memory_id: c for c in candidates}
    capped: dict[str, float] = {}

    def ceiling(candidate: Candidate, seen: frozenset[str]) -> float:
        if candidate.memory_id not in capped:
            key = candidate.key
            hit = by_id.get(candidate.context_of or "")
            if hit is not None and hit.memory_id not in seen:
                key = min(key, ceiling(hit, seen | {candidate.memory_id}))
            capped[candidate.memory_id] = key
        return capped[candidate.memory_id]

    for candidate in candidates:
        key = ceiling(candidate, frozenset())
        if key < candidate.key:
            candidate.key = key
            candidate.final_score = shown_score(key, margin)


def _by_key(candidate: Candidate) -> tuple[float, bool, int, str]:
    return (
        -candidate.key,
        candidate.context_of is not None,
        candidate.fused_rank,
        candidate.memory_id,
    )


def order_candidates(
    candidates: Sequence[Candidate],
    *,
    rerank_top_n: int,
    rerank: Callable[[Sequence[Candidate]], list[float]] | None,
    boost_of: Callable[[Candidate], float],
    base_k: float,
    max_boost: float = 1.0,
    min_score: float = 0.0,
    by_relevance: bool = True,
    margin: float = 0.0,
) -> tuple[list[Candidate], str]:
    """Rerank the top-N fused candidates, apply boosts, drop what falls below the floor.

    ``candidates`` arrive in fused order, each with its calibrated ``relevance``. Returns the
    final order and the score basis. Every score is in [0, 1] and never rises down the list.

    Without a reranker a candidate's base score is its relevance. With ``by_relevance`` the
    list is ordered by ``order_key`` (the base score's log-odds plus the recency boost's shift,
    at most ``margin``) and each shows ``shown_score`` of its key; a context neighbour never
    above its hit (``cap_context``). Otherwise (RRF fusion) by ``rank_score(fused_rank) x
    boost`` as the design orders it, scores ``relevance x boost / max_boost`` capped so they
    never rise down the list. With a reranker the top N are ordered the same way on the
    cross-encoder's probability, and the tail keeps its fused order below the head's lowest
    score, no boost.

    The floor: a candidate whose base score (relevance, or the cross-encoder's probability) is
    below ``min_score`` is not returned, whatever its boost; one not reranked is judged on its
    ``floor_basis`` where it has one (late interaction: the two-channel relevance).
    """
    scale = max(1.0, max_boost)
    head = list(candidates[:rerank_top_n]) if rerank is not None else []
    tail = list(candidates[len(head) :])
    if head and rerank is not None:
        raw = rerank(head)
        for candidate, score in zip(head, raw, strict=True):
            candidate.rerank_score = float(score)
            candidate.base_score = rerank_probability(float(score))
            _place(candidate, boost_of(candidate), scale, margin)
        head = [c for c in head if c.base_score >= min_score]
        # (No context cap: the cross-encoder scores each memory on its own, credit plays no
        # part in its probability.)
        head.sort(key=lambda c: (-c.key, c.memory_id))
        return head + _below(head, tail, min_score), BASIS_RERANK
    kept = []
    for candidate in candidates:
        candidate.rerank_score = None
        candidate.base_score = candidate.relevance
        if _floor_value(candidate) < min_score:
            continue
        boost = boost_of(candidate)
        if by_relevance:
            _place(candidate, boost, scale, margin)
        else:
            candidate.boost = boost
            candidate.final_score = min(1.0, candidate.base_score * boost / scale)
        kept.append(candidate)
    if by_relevance:
        cap_context(kept, margin)
        return sorted(kept, key=_by_key), BASIS_FUSED
    ordered = sorted(
        kept, key=lambda c: (-rank_score(c.fused_rank, base_k) * c.boost, c.fused_rank, c.memory_id)
    )
    ceiling = 1.0
    for candidate in ordered:
        ceiling = min(ceiling, candidate.final_score)
        candidate.final_score = ceiling
    return ordered, BASIS_FUSED


def _place(candidate: Candidate, boost: float, scale: float, margin: float) -> None:
    """A candidate's boost, order key and shown score from its base score."""
    candidate.boost = boost
    candidate.key = order_key(candidate.base_score, boost, scale, margin)
    candidate.final_score = shown_score(candidate.key, margin)


def _below(
    head: Sequence[Candidate], tail: Sequence[Candidate], min_score: float
) -> list[Candidate]:
    """The candidates past the rerank window: fused order, each at most the lowest score above
    it (no boost), those under the floor dropped."""
    ceiling = head[-1].final_score if head else 1.0
    kept: list[Candidate] = []
    for candidate in tail:
        candidate.rerank_score = None
        candidate.base_score = candidate.relevance
        candidate.boost = 1.0
        if _floor_value(candidate) < min_score:
            continue
        ceiling = min(ceiling, candidate.base_score)
        candidate.final_score = ceiling
        kept.append(candidate)
    return kept


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
