"""The channels: the engine fetch (dense and BM25, one call in hybrid mode), each channel cut to
its best chunk per memory, pseudo-relevance feedback on the BM25 query, BM25's relative floor,
and the RRF fusion of the channels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ferrex.core.deps import Deps
from ferrex.core.index.date_terms import query_terms
from ferrex.core.index.points import sparse_text
from ferrex.core.ports import IndexFilter, IndexHit, SparseVec, Vector
from ferrex.core.recall.feedback import expand
from ferrex.core.recall.formulas import (
    apply_relative_floor,
    best_chunk_per_memory,
    fuse_rrf,
    needs_deeper_fetch,
)

# The deepest a channel is fetched when chunked procedures crowd it (points, not memories).
MAX_CHUNK_FETCH = 8000


@dataclass
class Channels:
    """What the channels found for a query."""

    dense: list[IndexHit]  # best chunk per memory, the first ``prefetch`` memories
    bm25: list[IndexHit]  # likewise; every BM25 score counts as evidence, floored out or not
    sparse_query: SparseVec  # the BM25 query after feedback
    fused: dict[str, float]  # memory id -> its fused score, in RRF order
    dense_ranks: dict[str, int]  # each channel's own ranks (explain only)
    bm25_ranks: dict[str, int]
    below_floor: frozenset[str]  # ranked by BM25, kept out of the fusion (explain only)


def fetch(
    deps: Deps, query: str, vector: Vector, flt: IndexFilter, prefetch: int, explain: bool
) -> Channels:
    """Both channels from one engine call (hybrid), fused by RRF (k=60)."""
    cfg = deps.settings.retrieval
    # Months and years the query names match episodes' reserved date terms (date_terms.py).
    sparse = deps.sparse.encode_query(f"{query} {query_terms(query)}".rstrip())
    dense_hits, bm25_hits, depth = _search(deps, vector, sparse, flt, prefetch, explain)
    sparse_query = sparse
    if cfg.mode == "hybrid" and cfg.feedback.weight > 0 and sparse and bm25_hits:
        sparse_query = feedback_query(deps, sparse, dense_hits, bm25_hits)
        bm25_hits = best_chunk_per_memory(
            deps.index.sparse_search(sparse_query, flt, depth), prefetch
        )
    bm25_ranks = _ranks(bm25_hits) if explain else {}  # the channel's own ranks
    fused_channels, below_floor = _fused_channels(deps, dense_hits, bm25_hits, bm25_ranks)
    best: dict[str, float] = {}
    for hit in fuse_rrf(fused_channels, cfg.rrf_k, 2 * prefetch):
        if hit.memory_id and hit.score > best.get(hit.memory_id, float("-inf")):
            best[hit.memory_id] = hit.score
    return Channels(
        dense=dense_hits,
        bm25=bm25_hits,
        sparse_query=sparse_query,
        fused=best,
        dense_ranks=_ranks(dense_hits) if explain else {},
        bm25_ranks=bm25_ranks,
        below_floor=below_floor,
    )


def _fused_channels(
    deps: Deps, dense_hits: list[IndexHit], bm25_hits: list[IndexHit], bm25_ranks: dict[str, int]
) -> tuple[list[list[IndexHit]], frozenset[str]]:
    """The channels RRF fuses (in hybrid mode BM25 above its relative floor), and the
    memories BM25 ranked under that floor (with ``bm25_ranks``: explain)."""
    cfg = deps.settings.retrieval
    if cfg.mode == "dense":
        return [dense_hits], frozenset()
    if cfg.mode != "hybrid":
        return [bm25_hits], frozenset()
    kept = apply_relative_floor(bm25_hits, cfg.bm25_relative_floor)
    below_floor = frozenset(bm25_ranks) - {hit.memory_id for hit in kept}
    return [dense_hits, kept], below_floor


def _search(
    deps: Deps,
    vector: Vector,
    sparse: SparseVec,
    flt: IndexFilter,
    prefetch: int,
    explain: bool,
) -> tuple[list[IndexHit], list[IndexHit], int]:
    """Each channel's first ``prefetch`` memories (best chunk), and the depth fetched.

    Channels are lists of points (a chunked procedure has one per step); each must name
    ``prefetch`` distinct memories. The first page has 50% headroom for a few chunks; a page
    still crowded by chunks is fetched again deeper (x4, up to MAX_CHUNK_FETCH points)."""
    cfg = deps.settings.retrieval
    dense_hits: list[IndexHit] = []
    bm25_hits: list[IndexHit] = []
    depth = prefetch + prefetch // 2
    while True:
        if cfg.mode == "hybrid":
            # Both channels in ONE engine call (a query batch); fused here.
            searches = [("dense", flt, depth)] + ([("sparse", flt, depth)] if sparse else [])
            found = deps.index.search_batch(vector, sparse, searches, cfg.hnsw_ef)
            dense_hits, bm25_hits = found[0], found[1] if sparse else []
        else:
            if cfg.mode == "dense" or explain:
                dense_hits = deps.index.dense_search(vector, flt, depth, cfg.hnsw_ef)
            if cfg.mode == "bm25" or explain:
                bm25_hits = deps.index.sparse_search(sparse, flt, depth)
        crowded = any(needs_deeper_fetch(hits, depth, prefetch) for hits in (dense_hits, bm25_hits))
        if not crowded or depth >= MAX_CHUNK_FETCH:
            break
        depth = min(MAX_CHUNK_FETCH, depth * 4)
    return (
        best_chunk_per_memory(dense_hits, prefetch),
        best_chunk_per_memory(bm25_hits, prefetch),
        depth,
    )


def feedback_query(
    deps: Deps, sparse: SparseVec, dense_hits: list[IndexHit], bm25_hits: list[IndexHit]
) -> SparseVec:
    """The query with the first fused hits' BM25 terms (core/recall/feedback.py)."""
    cfg = deps.settings.retrieval
    first = fuse_rrf([dense_hits, bm25_hits], cfg.rrf_k, cfg.feedback.docs)
    rows = deps.meta.get_memories([hit.memory_id for hit in first])
    docs = [
        deps.sparse.encode_document(
            sparse_text(rows[h.memory_id], rows[h.memory_id].display_text())
        )
        for h in first
        if h.memory_id in rows
    ]
    return expand(sparse, docs, cfg.feedback.weight, cfg.feedback.terms)


def _ranks(hits: Sequence[IndexHit]) -> dict[str, int]:
    ranks: dict[str, int] = {}
    for hit in hits:
        if hit.memory_id and hit.memory_id not in ranks:
            ranks[hit.memory_id] = len(ranks) + 1
    return ranks
