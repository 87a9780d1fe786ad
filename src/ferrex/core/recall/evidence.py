"""Every candidate's evidence from every channel: each channel's score for the candidates the
other channel found, and with late interaction each candidate's MaxSim
(core/index/late_interaction.py), all in one engine call."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from ferrex.core.deps import Deps
from ferrex.core.ids import point_id
from ferrex.core.index.late_interaction import mean_maxsim
from ferrex.core.ports import IndexFilter, IndexHit, SparseVec, Vector
from ferrex.core.recall.channels import MAX_CHUNK_FETCH
from ferrex.core.recall.formulas import best_chunk_per_memory, needs_deeper_fetch

Only = Callable[[tuple[str, ...]], IndexFilter]


def complete(
    deps: Deps,
    memory_ids: list[str],
    dense_hits: list[IndexHit],
    bm25_hits: list[IndexHit],
    vector: Vector,
    sparse: SparseVec,
    flt: IndexFilter,
    tokens: np.ndarray | None = None,
) -> tuple[list[IndexHit], list[IndexHit], dict[str, float] | None]:
    """Each channel's score for the candidates the other channel found (one filtered
    search per channel, both in one engine call), so every candidate's relevance uses its
    real cosine and BM25; with query ``tokens``, every candidate's late-interaction MaxSim
    in the same call (None: no late interaction)."""
    cfg = deps.settings.retrieval
    channels = (("dense", dense_hits), ("sparse", bm25_hits))
    only = _only(flt, dense_hits, bm25_hits)
    missing = _missing(memory_ids, channels, sparse)
    searches = [(channel, only(ids), 4 * len(ids)) for channel, ids in missing.items()]
    late_ids = tuple(sorted(memory_ids)) if tokens is not None and memory_ids else ()
    # Each candidate's chunks: MAX_CHUNK_FETCH bounds it as for the channels.
    depth = min(MAX_CHUNK_FETCH, 4 * len(late_ids))
    if late_ids:
        searches.append(("tokens", only(late_ids), depth))
    results = deps.index.search_batch(vector, sparse, searches, cfg.hnsw_ef, tokens)
    found = dict(zip(missing, results, strict=False))
    late: dict[str, float] | None = None
    if tokens is not None:
        late = {}
        if late_ids:
            late = _late(deps, results[-1], late_ids, depth, only, vector, sparse, tokens)
    dense_out, bm25_out = (
        [*hits, *best_chunk_per_memory(found[channel], len(missing[channel]))]
        if channel in found
        else hits
        for channel, hits in channels
    )
    return dense_out, bm25_out, late


def _missing(
    memory_ids: list[str], channels: tuple[tuple[str, list[IndexHit]], ...], sparse: SparseVec
) -> dict[str, tuple[str, ...]]:
    """Channel -> the candidates it did not return (BM25 only for a query with terms)."""
    missing: dict[str, tuple[str, ...]] = {}
    for channel, hits in channels:
        have = {hit.memory_id for hit in hits}
        ids = tuple(sorted(m for m in memory_ids if m not in have))
        if ids and (channel == "dense" or sparse):
            missing[channel] = ids
    return missing


def _only(flt: IndexFilter, dense_hits: list[IndexHit], bm25_hits: list[IndexHit]) -> Only:
    """The filter that finds just the given memories."""
    kinds = {hit.memory_id: hit.memory_type for hit in (*dense_hits, *bm25_hits)}

    def only(ids: tuple[str, ...]) -> IndexFilter:
        # A memory indexed as one point is looked up by its point id; a procedure (one
        # point per step when long) by its memory id, all of its points.
        several = tuple(m for m in ids if kinds.get(m, "") in ("", "procedural"))
        single = tuple(point_id(m) for m in ids if kinds.get(m, "") not in ("", "procedural"))
        return replace(flt, memory_ids=several or None, point_ids=single or None)

    return only


def _late(
    deps: Deps,
    hits: list[IndexHit],
    late_ids: tuple[str, ...],
    depth: int,
    only: Only,
    vector: Vector,
    sparse: SparseVec,
    tokens: np.ndarray,
) -> dict[str, float]:
    """Each candidate's mean MaxSim from its best chunk (``hits``: the tokens channel's page)."""
    cfg = deps.settings.retrieval
    # Long procedures (a point per step) can crowd the page: fetched deeper (x4, up to
    # MAX_CHUNK_FETCH points) until every candidate's best chunk is in.
    while needs_deeper_fetch(hits, depth, len(late_ids)) and depth < MAX_CHUNK_FETCH:
        depth = min(MAX_CHUNK_FETCH, depth * 4)
        deeper = [("tokens", only(late_ids), depth)]
        hits = deps.index.search_batch(vector, sparse, deeper, cfg.hnsw_ef, tokens)[0]
    return {
        hit.memory_id: mean_maxsim(hit.score, len(tokens))
        for hit in best_chunk_per_memory(hits, len(late_ids))
    }
