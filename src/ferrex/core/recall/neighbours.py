"""Context-neighbour credit on the candidates (the rules: core/recall/context.py), and its lookups
through the cache: each hit's stored neighbours (SQLite) and the dense cosine of each (hit,
neighbour) pair (the index), kept per namespace write generation (core/cache.py)."""

from __future__ import annotations

import math

from ferrex.core.cache import NO_COSINE
from ferrex.core.deps import Deps
from ferrex.core.ports import IndexFilter, StoredNeighbour
from ferrex.core.recall.context import (
    NeighbourCredit,
    context_credit,
    context_pairs,
    hit_asks,
    is_answer,
)
from ferrex.core.recall.relevance import Evidence


def credit(
    deps: Deps,
    scored: dict[str, tuple[float, Evidence]],
    flt: IndexFilter,
    gate: dict[str, float] | None = None,
) -> NeighbourCredit:
    """Context neighbours (core/recall/context.py): updates ``scored`` in place (and ``gate``,
    the two-channel relevance the answer gate judges, with the same credit); returns the
    credit: the neighbours that joined, each with the hit it came by, and the hit each
    memory it raised is context of. A filtered recall (entities, a time range, a past moment,
    history) lets credit reach its own candidates only."""
    cfg = deps.settings.retrieval.neighbours
    relevance = {mid: value for mid, (value, _) in scored.items()}
    top = sorted(relevance, key=lambda mid: (-relevance[mid], mid))[: cfg.top]
    # The generation before any read: a write that lands meanwhile bumps it, so what is
    # read now is never kept under the generation that follows the write.
    generation = deps.cache.generation(flt.namespace)
    near = stored_neighbours(deps, flt.namespace, generation, top, cfg.window)
    may_join = (
        flt.entity_ids is None
        and flt.time_after is None
        and flt.time_before is None
        and flt.as_of is None
        and flt.validity == "current"
    )
    similarity = None
    if cfg.min_similarity > -1:
        # The cosines of the pairs credit may pass along (``gate`` holds the same
        # candidates, so its pairs are these; a pair without a cosine passes nothing).
        # An answer passes without one (core/recall/context.py ``is_answer``).
        others: dict[str, list[str]] = {}
        for hit, other, offset in context_pairs(relevance, near, cfg, may_join=may_join):
            if not is_answer(offset, hit_asks(near[hit]), cfg):
                others.setdefault(hit, []).append(other)
        model = flt.model or deps.embedder.info.pin
        similarity = similarities(deps, flt.namespace, generation, model, others)
    credited = context_credit(relevance, near, cfg, may_join=may_join, similarity=similarity)
    for mid, value in credited.relevance.items():
        evidence = scored[mid][1] if mid in scored else (None, None, 0.0)
        scored[mid] = (value, evidence)
    if gate is not None:
        gate.update(
            context_credit(gate, near, cfg, may_join=may_join, similarity=similarity).relevance
        )
    return credited


def stored_neighbours(
    deps: Deps, namespace: str, generation: int, memory_ids: list[str], window: int
) -> dict[str, list[StoredNeighbour]]:
    """``meta.stored_neighbours`` through the cache: what this generation read already,
    and the rest in one lookup (a memory with no row, gone mid-flight, has no entry)."""
    cached = deps.cache.neighbours
    near: dict[str, list[StoredNeighbour]] = {}
    missing = []
    for memory_id in memory_ids:
        found = cached.get((namespace, generation, window, memory_id))
        if found is None:
            missing.append(memory_id)
        else:
            near[memory_id] = found
    if missing:
        fetched = deps.meta.stored_neighbours(namespace, missing, window)
        for memory_id, found in fetched.items():
            cached.put((namespace, generation, window, memory_id), found)
        near.update(fetched)
    return {m: near[m] for m in memory_ids if m in near}


def similarities(
    deps: Deps, namespace: str, generation: int, model: str, others: dict[str, list[str]]
) -> dict[tuple[str, str], float]:
    """``index.dense_similarities`` through the cache: the pairs this generation scored
    already, and the rest in one engine call (a pair it gives no cosine stays without)."""
    cached = deps.cache.cosines
    out: dict[tuple[str, str], float] = {}
    missing: dict[str, list[str]] = {}
    for hit, rest in others.items():
        for other in rest:
            value = cached.get((namespace, generation, model, hit, other))
            if value is None:
                missing.setdefault(hit, []).append(other)
            elif not math.isnan(value):  # NO_COSINE: the index gave none
                out[(hit, other)] = value
    if missing:
        scored = deps.index.dense_similarities(missing, model)
        for hit, rest in missing.items():
            for other in rest:
                value = scored.get((hit, other), NO_COSINE)
                cached.put((namespace, generation, model, hit, other), value)
                if not math.isnan(value):
                    out[(hit, other)] = value
    return out
