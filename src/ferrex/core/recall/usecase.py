"""The recall use case (spec "Retrieval Pipeline Detail"): hybrid retrieval, staleness
filtering, reranking, recency boosts, token budget, freshness annotation and query-time
contradictions, as a list of stages (each a module of this package)."""

from __future__ import annotations

from datetime import datetime

import numpy as np

from ferrex.core import errors
from ferrex.core.cache import embedding_hash
from ferrex.core.deps import Deps
from ferrex.core.errors import FerrexError
from ferrex.core.index.late_interaction import ContentWords, query_tokens
from ferrex.core.ports import IndexFilter, Vector
from ferrex.core.recall.budget import Fitted, fit
from ferrex.core.recall.candidates import Lifts, Page, admit, hit_of
from ferrex.core.recall.channels import Channels, fetch
from ferrex.core.recall.context import NeighbourCredit
from ferrex.core.recall.contradictions import flag, join_partners
from ferrex.core.recall.evidence import complete
from ferrex.core.recall.filters import Scope, cache_params, scope_of
from ferrex.core.recall.gate import answer_gate, floor_of, held_back, no_results
from ferrex.core.recall.neighbours import credit
from ferrex.core.recall.ordering import booster, cross_encoder, order, reranker
from ferrex.core.recall.records import Retrieved, Scored
from ferrex.core.recall.relevance import Evidence, score
from ferrex.core.requests import RecallRequest
from ferrex.core.results import RecallHit, RecallResult


class Recall:
    """The recall use case."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps
        self.settings = deps.settings
        self.meta = deps.meta
        self.index = deps.index
        self.embedder = deps.embedder
        self.reranker = deps.reranker
        self.cache = deps.cache
        self.entities = deps.entities
        self.access = deps.access
        self.content_words = ContentWords(deps.sparse)

    @property
    def late(self) -> bool:
        """Whether candidates are scored by late interaction: on, hybrid, and the index has
        the channel (an index built without it gets it with ``ferrex rebuild-index``)."""
        cfg = self.settings.retrieval
        return cfg.late_interaction.enabled and cfg.mode == "hybrid" and self.index.late_interaction

    def run(self, request: RecallRequest) -> RecallResult:
        cfg = self.settings.retrieval
        limit = self._limit(request)
        self.deps.sync_external_writes()
        namespace = request.namespace or self.deps.namespace
        now = self.deps.now()
        scope = scope_of(request, namespace, self.embedder.info.pin, self.entities, now)
        retrieved, cache_hit = self._retrieved(request, scope, limit)
        reranks = cross_encoder(self.deps)
        floor = floor_of(scope, cfg)
        gated = answer_gate(retrieved, scope, cfg, reranks)
        page = admit(
            self.meta,
            self.settings,
            [] if gated is not None else retrieved.candidates,
            request,
            scope,
            limit=limit,
            floor=floor,
            margin=cfg.recency_margin,
            prunable=not reranks and cfg.mode == "hybrid" and cfg.fusion == "relevance",
            now=now,
            lifts=Lifts.of(self.settings, request, now),
        )
        boost = booster(self.settings, page.rows, now)
        rerank = reranker(self.deps, request.query, page.rows, retrieved)
        ordered, basis = order(
            self.settings,
            page.candidates,
            rerank=rerank if reranks and page.candidates else None,
            rerank_top_n=cfg.rerank_top_n,
            boost=boost,
            floor=floor,
        )
        page.floored = page.floored or (floor > 0 and len(ordered) < len(page.candidates))
        held = set()
        if gated is None:
            held = held_back(self.settings, page.candidates, page.stale, limit, boost, floor)
        fitted = fit(self.embedder, ordered[:limit], page.rows, request.max_tokens)
        hits = self._hits(fitted, page, retrieved, request.explain, now)
        partners = flag(
            self.meta,
            namespace,
            [page.rows[c.memory_id] for c in fitted.selected],
            hits,
            request.as_of,
        )
        join_partners(self.settings, partners, request, hits, held, now)
        self.access.record([c.memory_id for c in fitted.selected])
        return self._answer(
            request, scope, hits, basis, page, fitted, held, gated, floor, cache_hit
        )

    def _limit(self, request: RecallRequest) -> int:
        cfg = self.settings.retrieval
        limit = request.limit or cfg.default_limit
        if limit > cfg.max_limit:  # validated with the request too (parse's max_limit)
            raise FerrexError(
                errors.TOO_LARGE,
                f"recall: limit is at most {cfg.max_limit} (got {limit})",
                field="limit",
            )
        return limit

    def _retrieved(
        self, request: RecallRequest, scope: Scope, limit: int
    ) -> tuple[Retrieved, bool]:
        """The retrieval stage's output, from the recall cache or retrieved now; and whether
        it came from the cache."""
        vector, tokens = self._query_vectors(request.query)
        prefetch = max(self.settings.retrieval.prefetch_limit, 2 * limit)
        key = self.cache.key(
            scope.namespace, embedding_hash(vector), cache_params(request, scope, prefetch)
        )
        cached = self.cache.get(key)
        if cached is not None:
            return cached, True
        retrieved = self._retrieve(
            request.query, vector, tokens, scope.flt, prefetch, request.explain
        )
        self.cache.put(key, retrieved)
        return retrieved, False

    def _query_vectors(self, query: str) -> tuple[Vector, np.ndarray | None]:
        """The query's embedding and, with late interaction, its content token vectors (one
        model pass for both)."""
        if not self.late:
            key: tuple[str, ...] = (self.embedder.info.pin, query)
            vector = self.cache.queries.get(key)
            if vector is None:
                vector = self.embedder.embed_query(query)
                self.cache.queries.put(key, vector)
            return vector, None
        key = (self.embedder.info.pin, query, "tokens")
        both = self.cache.queries.get(key)
        if both is None:
            embedded = self.embedder.embed_query_tokens(query)
            both = (embedded.dense, query_tokens(embedded, self.content_words))
            self.cache.queries.put(key, both)
        return both

    def _retrieve(
        self,
        query: str,
        vector: Vector,
        tokens: np.ndarray | None,
        flt: IndexFilter,
        prefetch: int,
        explain: bool,
    ) -> Retrieved:
        """Candidates in fused order, each with its evidence: the channels (fused by RRF),
        every channel's evidence for every candidate, their calibrated relevance, context
        credit from their neighbours."""
        cfg = self.settings.retrieval
        hybrid = cfg.mode == "hybrid"
        found = fetch(self.deps, query, vector, flt, prefetch, explain)
        query_weight = float(sum(found.sparse_query.values))
        late: dict[str, float] | None = None
        if hybrid:
            found.dense, found.bm25, late = complete(
                self.deps,
                list(found.fused),
                found.dense,
                found.bm25,
                vector,
                found.sparse_query,
                flt,
                tokens,
            )
        scored, gate = score(
            list(found.fused),
            found.dense,
            found.bm25,
            cfg,
            query_weight=query_weight,
            points=self.meta.count_memories(flt.namespace),
            fetched=prefetch,
            late=late,
        )
        context = NeighbourCredit({})
        if hybrid and cfg.neighbours.weight > 0 and scored:
            context = credit(self.deps, scored, flt, gate or None)
        return _records(
            found, scored, gate, context, late, by_relevance=hybrid and cfg.fusion == "relevance"
        )

    def _hits(
        self, fitted: Fitted, page: Page, retrieved: Retrieved, explain: bool, now: datetime
    ) -> list[RecallHit]:
        hits = []
        for c in fitted.selected:
            hit = hit_of(
                self.settings, page.rows[c.memory_id], c, page.freshness[c.memory_id], explain, now
            )
            if retrieved.by_id[c.memory_id].neighbour_of is not None:
                # Not found by the query itself: context of a hit stored next to it (explain
                # names the hit: neighbour_of).
                hit.included_as = "neighbour"
            hits.append(hit)
        return hits

    def _answer(
        self,
        request: RecallRequest,
        scope: Scope,
        hits: list[RecallHit],
        basis: str,
        page: Page,
        fitted: Fitted,
        held: set[str],
        gated: tuple[float, float] | None,
        floor: float,
        cache_hit: bool,
    ) -> RecallResult:
        reranked = basis == "rerank"
        status = None
        if not reranked:
            status = self.reranker.unavailable_reason or (
                "no candidates" if not page.candidates else "reranking disabled"
            )
        empty = None
        if not hits:
            empty = no_results(
                self.settings.retrieval,
                bool(page.candidates) or page.floored,
                gated,
                floor,
                held=len(held),
                over_budget=fitted.over_budget,
            )
        return RecallResult(
            hits=hits,
            namespace=scope.namespace,
            reranked=reranked,
            score_basis=basis,
            stale_held_back=len(held),
            rerank_status=status,
            truncated=fitted.truncated,
            tokens=fitted.tokens,
            unresolved_entities=scope.unresolved,
            cache_hit=cache_hit if request.explain else None,
            no_results=empty,
        )


def _records(
    found: Channels,
    scored: dict[str, tuple[float, Evidence]],
    gate: dict[str, float],
    context: NeighbourCredit,
    late: dict[str, float] | None,
    *,
    by_relevance: bool,
) -> Retrieved:
    """One record per candidate, in fused order (by the calibrated relevance with score
    fusion, RRF breaking ties)."""
    best = found.fused
    for mid in context.joined:
        best.setdefault(mid, 0.0)
    if by_relevance:
        best = {mid: scored[mid][0] for mid in best}
    records = []
    # At a tie, a memory lifted by context after the others (credit lifts it at most to its
    # hit's relevance, exactly, often).
    lifted = context.context_of
    for mid, fused in sorted(best.items(), key=lambda item: (-item[1], item[0] in lifted, item[0])):
        relevance, (cosine, bm25, bm25_normed) = scored.get(mid, (0.0, (None, None, 0.0)))
        records.append(
            Scored(
                memory_id=mid,
                score=fused,
                dense_rank=found.dense_ranks.get(mid),
                bm25_rank=found.bm25_ranks.get(mid),
                relevance=relevance,
                cosine=cosine,
                bm25=bm25,
                bm25_norm=bm25_normed,
                late=late.get(mid) if late else None,
                gate_relevance=gate.get(mid, relevance) if gate else None,
                neighbour_of=context.joined.get(mid),
                context_of=context.context_of.get(mid),
                below_bm25_floor=mid in found.below_floor,
            )
        )
    return Retrieved(records)
