"""Recall (spec "Retrieval Pipeline Detail"): hybrid retrieval, staleness filtering,
reranking, recency boosts, token budget, freshness annotation and query-time contradictions."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime

import numpy as np

from ferrex.core import conflict as conflicts
from ferrex.core import errors
from ferrex.core.cache import NO_COSINE, CachedRecall, embedding_hash
from ferrex.core.date_terms import query_terms
from ferrex.core.deps import Deps
from ferrex.core.errors import FerrexError
from ferrex.core.feedback import expand
from ferrex.core.ids import point_id
from ferrex.core.indexing import sparse_text
from ferrex.core.late_interaction import ContentWords, mean_maxsim, query_tokens
from ferrex.core.memory import Memory, MemoryType
from ferrex.core.neighbours import context_credit, context_pairs, hit_asks, is_answer
from ferrex.core.ports import (
    IndexFilter,
    IndexHit,
    SparseVec,
    StoredNeighbour,
    Vector,
)
from ferrex.core.relevance import answers, evidence_of, max_boost, score_evidence
from ferrex.core.requests import RecallRequest
from ferrex.core.results import RecallHit, RecallResult
from ferrex.core.retrieval import (
    Candidate,
    apply_relative_floor,
    best_chunk_per_memory,
    fit_budget,
    fuse_rrf,
    needs_deeper_fetch,
    order_candidates,
    recency_boost,
)
from ferrex.core.staleness import STALE, Freshness, age_days, assess, effective_confidence

# The deepest a channel is fetched when chunked procedures crowd it (points, not memories).
MAX_CHUNK_FETCH = 8000


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
        limit = request.limit or cfg.default_limit
        if limit > cfg.max_limit:  # validated with the request too (parse's max_limit)
            raise FerrexError(
                errors.TOO_LARGE,
                f"recall: limit is at most {cfg.max_limit} (got {limit})",
                field="limit",
            )
        self.deps.sync_external_writes()
        namespace = request.namespace or self.deps.namespace
        now = self.deps.now()

        unresolved: list[str] = []
        entity_ids: tuple[int, ...] | None = None
        if request.entities:
            resolved: list[int] = []
            for name in request.entities:
                resolution = self.entities.resolve(namespace, name, create=False, at=now)
                if resolution.entity_id is None:
                    unresolved.append(name)
                else:
                    resolved.append(resolution.entity_id)
            entity_ids = tuple(sorted(set(resolved)))
        types = tuple(request.types or ())
        validity = "all" if request.include_invalidated or request.version else "current"
        if request.version is not None:
            types = ("procedural",)
        flt = IndexFilter(
            model=self.embedder.info.pin,
            namespace=namespace,
            types=types,
            entity_ids=entity_ids,
            time_after=request.time_range.after if request.time_range else None,
            time_before=request.time_range.before if request.time_range else None,
            validity=validity,  # type: ignore[arg-type]
            as_of=request.as_of,
        )
        vector, tokens = self._query_vectors(request.query)
        prefetch = max(cfg.prefetch_limit, 2 * limit)
        params = (
            # The exact text too: the cross-encoder scores (cached with the candidates) see the
            # raw query, which an uncased embedding of two spellings would not tell apart.
            request.query,
            types,
            entity_ids,
            flt.time_after,
            flt.time_before,
            validity,
            request.as_of,
            request.explain,
            prefetch,
            request.version,
        )
        key = self.cache.key(namespace, embedding_hash(vector), params)
        cached = self.cache.get(key)
        cache_hit = cached is not None
        if cached is None:
            cached = self._retrieve(request.query, vector, tokens, flt, prefetch, request.explain)
            self.cache.put(key, cached)

        if self.settings.rerank and not self.reranker.available:
            self.reranker.load()
        cross_encoder = self.reranker.available and cfg.rerank_top_n > 0
        scale = max_boost(self.settings.recency)

        # The question itself, on every candidate's evidence (stale ones count: they are held
        # back, not irrelevant): without a cross-encoder, a best candidate weak on both kinds
        # of evidence means nothing here answers it. Hybrid only: its thresholds are set on
        # both channels' evidence (one channel would be judged on half of it, and ``explain``
        # fetches the other one).
        # A filter that selects (a time range with a bound, entities) does the choosing: the
        # query only orders what it selected, so neither the floor nor the gate drops any of it
        # ("what happened" over last week lists last week's events; scores stay the query's
        # relevance). ``types`` and ``version`` narrow without selecting (every unedited
        # procedure is version 1).
        selecting = (
            flt.time_after is not None or flt.time_before is not None or bool(request.entities)
        )
        floor = 0.0 if selecting else cfg.min_score
        gated: tuple[float, float] | None = None
        # (A neighbour that joined is left out when types are asked for: its type is unknown
        # until its row is read, and the loop below drops one of another type.)
        judged = [e[0] for e in cached.fused if not (types and e[0] in cached.joined)]
        if not cross_encoder and not selecting and cfg.mode == "hybrid" and judged:
            # On the two channels' relevance, where its thresholds were set (late interaction
            # reorders the candidates; it does not decide whether the question has an answer).
            judge = cached.gate_relevance or cached.relevance
            best_relevance = max(judge.get(mid, 0.0) for mid in judged)
            best_cosine = max(
                cached.evidence.get(mid, (None, None, 0.0))[0] or 0.0 for mid in judged
            )
            if not answers(best_relevance, best_cosine, cfg.answer_gate):
                gated = (best_relevance, best_cosine)

        # Candidates arrive by relevance (score fusion, no cross-encoder): one under the floor
        # is never returned, nor one whose relevance is under the page's lowest possible score
        # (its ``limit``-th candidate's relevance / the largest boost), as a boost is at most
        # that. Rows are read and assessed only up to there.
        prunable = not cross_encoder and cfg.mode == "hybrid" and cfg.fusion == "relevance"
        entries = [] if gated is not None else cached.fused
        rows: dict[str, Memory] = {}
        fetched: set[str] = set()
        candidates: list[Candidate] = []
        freshness: dict[str, Freshness] = {}
        stale: list[Candidate] = []
        floored = False
        chunk = limit + 8
        # With late interaction (no cross-encoder) the floor, like the gate, judges the
        # two-channel relevance it was chosen on: late interaction orders and scores the
        # candidates, it does not drop one the cosine and BM25 evidence keeps (a paraphrase
        # shares no token with the question: its MaxSim is low, its cosine is not).
        # (With a cross-encoder: those past its window, which it did not score.)
        two_channel = cached.gate_relevance
        for rank, (memory_id, score, dense_rank, bm25_rank) in enumerate(entries, start=1):
            relevance = cached.relevance.get(memory_id, 0.0)
            floor_basis = two_channel.get(memory_id, relevance) if two_channel else None
            if prunable and floor_basis is not None and floor_basis < floor:
                floored = True
                continue  # (the page is ordered by the late relevance, not by this)
            if prunable and floor_basis is None and relevance < floor:
                floored = True
                break
            if (
                prunable
                and len(candidates) >= limit
                and relevance < candidates[limit - 1].relevance / scale
            ):
                break
            if memory_id not in fetched:
                span = entries[rank - 1 : rank - 1 + chunk] if prunable else entries
                wanted = [e[0] for e in span if e[0] not in fetched]
                rows.update(self.meta.get_memories(wanted))
                fetched.update(wanted)
                chunk *= 2
            memory = rows.get(memory_id)
            if memory is None or memory.namespace != namespace:
                continue  # a row deleted mid-flight, or (never) another namespace
            if request.version is not None and memory.version != request.version:
                continue
            if memory_id in cached.joined and types and memory.type.value not in types:
                continue  # a neighbour of another type than the recall asked for
            fresh = assess(memory, now, self.settings.staleness)
            candidate = Candidate(memory_id, score, rank, dense_rank, bm25_rank)
            candidate.relevance = relevance
            candidate.floor_basis = floor_basis
            if request.explain and memory_id in cached.evidence:
                cosine, bm25, bm25_normed = cached.evidence[memory_id]
                candidate.extra.update(
                    cosine=None if cosine is None else round(cosine, 6),
                    bm25=None if bm25 is None else round(bm25, 6),
                    bm25_norm=round(bm25_normed, 6),
                )
                if memory_id in cached.late:
                    candidate.extra["late"] = round(cached.late[memory_id], 6)
                if memory_id in cached.gate_relevance:  # what the answer gate judged
                    candidate.extra["gate_relevance"] = round(cached.gate_relevance[memory_id], 6)
            if memory_id in cached.joined:
                candidate.extra["neighbour_of"] = cached.joined[memory_id]
            if memory_id in cached.below_bm25_floor:
                # Ranked by BM25, but under the relative floor: not counted in the fused score.
                candidate.extra["bm25_below_floor"] = True
            if fresh.staleness == STALE and not request.include_stale:
                stale.append(candidate)
                continue
            freshness[memory_id] = fresh
            candidates.append(candidate)

        use_rerank = cross_encoder and bool(candidates)

        def rerank(head: Sequence[Candidate]) -> list[float]:
            missing = [c for c in head if c.memory_id not in cached.rerank_scores]
            if missing:
                scores = self.reranker.score(
                    request.query, [rows[c.memory_id].display_text() for c in missing]
                )
                for candidate, score in zip(missing, scores, strict=True):
                    cached.rerank_scores[candidate.memory_id] = score
            return [cached.rerank_scores[c.memory_id] for c in head]

        def boost(candidate: Candidate) -> float:
            memory = rows[candidate.memory_id]
            return recency_boost(memory.type, age_days(memory, now), self.settings.recency)

        ordered, basis = order_candidates(
            candidates,
            rerank_top_n=cfg.rerank_top_n,
            rerank=rerank if use_rerank else None,
            boost_of=boost,
            base_k=cfg.fused_base_k,
            max_boost=scale,
            min_score=floor,
            by_relevance=cfg.mode == "hybrid" and cfg.fusion == "relevance",
        )
        floored = floored or (floor > 0 and len(ordered) < len(candidates))
        selected = ordered[:limit]
        held = (
            set() if gated is not None else self._held_back(candidates, stale, limit, boost, floor)
        )
        truncated = 0
        tokens_used = None
        # The best result's tokens and the budget, when the budget left no result.
        over_budget: tuple[int, int] | None = None
        if request.max_tokens is not None:
            texts = [rows[c.memory_id].display_text() for c in selected]
            keep, tokens_used = fit_budget(texts, self._count_budget_tokens, request.max_tokens)
            truncated = len(selected) - keep
            selected = selected[:keep]
            if keep == 0 and texts:  # rare: its count again, only to say it
                over_budget = (self._count_budget_tokens(texts[0]), request.max_tokens)
        hits = [
            self._result(rows[c.memory_id], c, freshness[c.memory_id], request.explain, now)
            for c in selected
        ]
        for hit, c in zip(hits, selected, strict=True):
            if c.memory_id in cached.joined:
                # Not found by the query itself: context of a hit stored next to it (explain
                # names the hit: neighbour_of).
                hit.included_as = "neighbour"
        partners = self._flag_contradictions(
            namespace, [rows[c.memory_id] for c in selected], hits, request.as_of
        )
        # Partners are today's facts: not added to a budgeted page, nor to a view of the past.
        if (
            partners
            and request.max_tokens is None
            and request.as_of is None
            and request.time_range is None
        ):
            # Layer 4: "both are returned with a contradiction flag" — the other side of each
            # flagged contradiction joins the results (after them, score 0) if it was not there.
            for partner, against in partners:
                partner_freshness = assess(partner, now, self.settings.staleness)
                if partner_freshness.staleness == STALE and not request.include_stale:
                    held.add(partner.id)  # held back like any stale memory; the flag names it
                    continue
                extra = self._result(
                    partner, Candidate(partner.id, 0.0, 0), partner_freshness, request.explain, now
                )
                extra.contradicts = against
                extra.included_as = "contradiction"
                hits.append(extra)
        self.access.record([c.memory_id for c in selected])
        reranked = basis == "rerank"
        return RecallResult(
            hits=hits,
            namespace=namespace,
            reranked=reranked,
            score_basis=basis,
            stale_held_back=len(held),
            rerank_status=None
            if reranked
            else self.reranker.unavailable_reason
            or ("no candidates" if not candidates else "reranking disabled"),
            truncated=truncated if request.max_tokens is not None else None,
            tokens=tokens_used if request.max_tokens is not None else None,
            unresolved_entities=unresolved,
            cache_hit=cache_hit if request.explain else None,
            no_results=None
            if hits
            else self._no_results(
                bool(candidates) or floored,
                gated,
                floor,
                held=len(held),
                over_budget=over_budget,
            ),
        )

    def _no_results(
        self,
        had_candidates: bool,
        gated: tuple[float, float] | None,
        floor: float,
        *,
        held: int = 0,
        over_budget: tuple[int, int] | None = None,
    ) -> str:
        """Why an answer is empty, in one short line: what emptied it, and what to change.

        The budget and the stale rule come before the floor: memories that matched were left
        out by the request itself, and saying "nothing is relevant" would hide them."""
        cfg = self.settings.retrieval
        if over_budget is not None:
            cost, budget = over_budget
            return (
                f"the best match needs {cost} tokens, over max_tokens {budget}: "
                "raise max_tokens to see it"
            )
        if held:
            what = "memory matches" if held == 1 else "memories match"
            return f"only stale {what} ({held}): ask with include_stale: true to see them"
        if gated is not None:
            gate = cfg.answer_gate
            return (
                f"nothing relevant: the best match has relevance {gated[0]:.2f} and cosine "
                f"{gated[1]:.2f} (an answer needs {gate.relevance:g} or {gate.cosine:g})"
            )
        if had_candidates and floor > 0:
            return f"no memory is relevant enough (min_score {floor:g})"
        return "no memory matches"

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

    def _count_budget_tokens(self, text: str) -> int:
        counter: Callable[[str], int] = getattr(
            self.embedder, "count_text_tokens", self.embedder.count_tokens
        )
        return counter(text)

    def _retrieve(
        self,
        query: str,
        vector: Vector,
        tokens: np.ndarray | None,
        flt: IndexFilter,
        prefetch: int,
        explain: bool,
    ) -> CachedRecall:
        """Candidates in fused order: both channels from one engine call, fused by RRF (k=60)."""
        cfg = self.settings.retrieval
        # Months and years the query names match episodes' reserved date terms (date_terms.py).
        sparse = self.deps.sparse.encode_query(f"{query} {query_terms(query)}".rstrip())
        dense_hits: list[IndexHit] = []
        bm25_hits: list[IndexHit] = []
        # Channels are lists of points (a chunked procedure has one per step); each must name
        # ``prefetch`` distinct memories. The first page has 50% headroom for a few chunks; a
        # page still crowded by chunks is fetched again deeper (x4, up to MAX_CHUNK_FETCH
        # points). Then each channel is cut to its first ``prefetch`` memories (best chunk).
        fetch = prefetch + prefetch // 2
        while True:
            if cfg.mode == "hybrid":
                # Both channels in ONE engine call (a query batch); fused here.
                searches = [("dense", flt, fetch)] + ([("sparse", flt, fetch)] if sparse else [])
                found = self.index.search_batch(vector, sparse, searches, cfg.hnsw_ef)
                dense_hits, bm25_hits = found[0], found[1] if sparse else []
            else:
                want_dense = cfg.mode == "dense" or explain
                want_bm25 = cfg.mode == "bm25" or explain
                if want_dense:
                    dense_hits = self.index.dense_search(vector, flt, fetch, cfg.hnsw_ef)
                if want_bm25:
                    bm25_hits = self.index.sparse_search(sparse, flt, fetch)
            crowded = any(
                needs_deeper_fetch(hits, fetch, prefetch) for hits in (dense_hits, bm25_hits)
            )
            if not crowded or fetch >= MAX_CHUNK_FETCH:
                break
            fetch = min(MAX_CHUNK_FETCH, fetch * 4)
        dense_hits = best_chunk_per_memory(dense_hits, prefetch)
        bm25_hits = best_chunk_per_memory(bm25_hits, prefetch)
        sparse_query = sparse
        if cfg.mode == "hybrid" and cfg.feedback.weight > 0 and sparse and bm25_hits:
            sparse_query = self._feedback_query(sparse, dense_hits, bm25_hits)
            bm25_hits = best_chunk_per_memory(
                self.index.sparse_search(sparse_query, flt, fetch), prefetch
            )
        query_weight = float(sum(sparse_query.values))
        all_bm25 = bm25_hits  # every BM25 score counts as evidence, floored out of RRF or not
        bm25_ranks = _ranks(bm25_hits) if explain else {}  # the channel's own ranks
        below_floor: frozenset[str] = frozenset()
        if cfg.mode == "hybrid":
            kept = apply_relative_floor(bm25_hits, cfg.bm25_relative_floor)
            if explain:
                below_floor = frozenset(bm25_ranks) - {hit.memory_id for hit in kept}
            bm25_hits = kept
            fused_channels = [dense_hits, bm25_hits]
        elif cfg.mode == "dense":
            fused_channels = [dense_hits]
        else:
            fused_channels = [bm25_hits]
        hits = fuse_rrf(fused_channels, cfg.rrf_k, 2 * prefetch)
        dense_ranks = _ranks(dense_hits) if explain else {}
        best: dict[str, float] = {}
        for hit in hits:
            if hit.memory_id and hit.score > best.get(hit.memory_id, float("-inf")):
                best[hit.memory_id] = hit.score
        late: dict[str, float] | None = None
        if cfg.mode == "hybrid":
            dense_hits, all_bm25, late = self._complete_evidence(
                list(best), dense_hits, all_bm25, vector, sparse_query, flt, tokens
            )
        evidence = evidence_of(
            list(best),
            dense_hits,
            all_bm25,
            query_weight=query_weight,
            points=self.meta.count_memories(flt.namespace),
            fetched=prefetch,
        )
        model = cfg.relevance if late is None else cfg.relevance_late
        scored = score_evidence(evidence, model, late, without_late=cfg.relevance)
        # With late interaction, the two-channel relevance too: what the floor and the gate
        # judge (the same evidence, the other model).
        gate_relevance: dict[str, float] = (
            {}
            if late is None
            else {mid: value for mid, (value, _) in score_evidence(evidence, cfg.relevance).items()}
        )
        joined: dict[str, str] = {}
        if cfg.mode == "hybrid" and cfg.neighbours.weight > 0 and scored:
            joined = self._neighbour_credit(scored, flt, gate_relevance or None)
            for mid in joined:
                best.setdefault(mid, 0.0)
        if cfg.mode == "hybrid" and cfg.fusion == "relevance":
            # Score fusion: the calibrated relevance orders the candidates (RRF breaks ties).
            best = {mid: scored[mid][0] for mid in best}
        ordered = sorted(best.items(), key=lambda item: (-item[1], item[0]))
        return CachedRecall(
            fused=[
                (mid, score, dense_ranks.get(mid), bm25_ranks.get(mid)) for mid, score in ordered
            ],
            below_bm25_floor=below_floor,
            relevance={mid: value for mid, (value, _) in scored.items()},
            evidence={mid: evidence for mid, (_, evidence) in scored.items()},
            joined=joined,
            late=late or {},
            gate_relevance=gate_relevance,
        )

    def _complete_evidence(
        self,
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
        cfg = self.settings.retrieval
        channels = (("dense", dense_hits), ("sparse", bm25_hits))
        kinds = {hit.memory_id: hit.memory_type for hit in (*dense_hits, *bm25_hits)}

        def only(ids: tuple[str, ...]) -> IndexFilter:
            # A memory indexed as one point is looked up by its point id; a procedure (one
            # point per step when long) by its memory id, all of its points.
            several = tuple(m for m in ids if kinds.get(m, "") in ("", "procedural"))
            single = tuple(point_id(m) for m in ids if kinds.get(m, "") not in ("", "procedural"))
            return replace(flt, memory_ids=several or None, point_ids=single or None)

        missing: dict[str, tuple[str, ...]] = {}
        for channel, hits in channels:
            have = {hit.memory_id for hit in hits}
            ids = tuple(sorted(m for m in memory_ids if m not in have))
            if ids and (channel == "dense" or sparse):
                missing[channel] = ids
        searches = [(channel, only(ids), 4 * len(ids)) for channel, ids in missing.items()]
        late_ids = tuple(sorted(memory_ids)) if tokens is not None and memory_ids else ()
        if late_ids:
            # Each candidate's chunks: MAX_CHUNK_FETCH bounds it as for the channels.
            depth = min(MAX_CHUNK_FETCH, 4 * len(late_ids))
            searches.append(("tokens", only(late_ids), depth))
        results = self.index.search_batch(vector, sparse, searches, cfg.hnsw_ef, tokens)
        found = dict(zip(missing, results, strict=False))
        late: dict[str, float] | None = None
        if tokens is not None:
            late = {}
            if late_ids:
                hits = results[-1]
                # Long procedures (a point per step) can crowd the page: fetched deeper (x4,
                # up to MAX_CHUNK_FETCH points) until every candidate's best chunk is in.
                while needs_deeper_fetch(hits, depth, len(late_ids)) and depth < MAX_CHUNK_FETCH:
                    depth = min(MAX_CHUNK_FETCH, depth * 4)
                    deeper = [("tokens", only(late_ids), depth)]
                    hits = self.index.search_batch(vector, sparse, deeper, cfg.hnsw_ef, tokens)[0]
                for hit in best_chunk_per_memory(hits, len(late_ids)):
                    late[hit.memory_id] = mean_maxsim(hit.score, len(tokens))
        dense_out, bm25_out = (
            [*hits, *best_chunk_per_memory(found[channel], len(missing[channel]))]
            if channel in found
            else hits
            for channel, hits in channels
        )
        return dense_out, bm25_out, late

    def _feedback_query(
        self, sparse: SparseVec, dense_hits: list[IndexHit], bm25_hits: list[IndexHit]
    ) -> SparseVec:
        """The query with the first fused hits' BM25 terms (core/feedback.py)."""
        cfg = self.settings.retrieval
        first = fuse_rrf([dense_hits, bm25_hits], cfg.rrf_k, cfg.feedback.docs)
        rows = self.meta.get_memories([hit.memory_id for hit in first])
        docs = [
            self.deps.sparse.encode_document(
                sparse_text(rows[h.memory_id], rows[h.memory_id].display_text())
            )
            for h in first
            if h.memory_id in rows
        ]
        return expand(sparse, docs, cfg.feedback.weight, cfg.feedback.terms)

    def _neighbour_credit(
        self,
        scored: dict[str, tuple[float, tuple[float | None, float | None, float]]],
        flt: IndexFilter,
        gate: dict[str, float] | None = None,
    ) -> dict[str, str]:
        """Context neighbours (core/neighbours.py): updates ``scored`` in place (and ``gate``,
        the two-channel relevance the answer gate judges, with the same credit); returns the
        neighbours that joined, each with the hit it came by. A filtered recall (entities, a
        time range, a past moment, history) lets credit reach its own candidates only."""
        cfg = self.settings.retrieval.neighbours
        relevance = {mid: value for mid, (value, _) in scored.items()}
        top = sorted(relevance, key=lambda mid: (-relevance[mid], mid))[: cfg.top]
        # The generation before any read: a write that lands meanwhile bumps it, so what is
        # read now is never kept under the generation that follows the write.
        generation = self.cache.generation(flt.namespace)
        near = self._stored_neighbours(flt.namespace, generation, top, cfg.window)
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
            # An answer passes without one (core/neighbours.py ``is_answer``).
            others: dict[str, list[str]] = {}
            for hit, other, offset in context_pairs(relevance, near, cfg, may_join=may_join):
                if not is_answer(offset, hit_asks(near[hit]), cfg):
                    others.setdefault(hit, []).append(other)
            model = flt.model or self.embedder.info.pin
            similarity = self._similarities(flt.namespace, generation, model, others)
        credit = context_credit(relevance, near, cfg, may_join=may_join, similarity=similarity)
        for mid, value in credit.relevance.items():
            evidence = scored[mid][1] if mid in scored else (None, None, 0.0)
            scored[mid] = (value, evidence)
        if gate is not None:
            gate.update(
                context_credit(gate, near, cfg, may_join=may_join, similarity=similarity).relevance
            )
        return credit.joined

    def _stored_neighbours(
        self, namespace: str, generation: int, memory_ids: list[str], window: int
    ) -> dict[str, list[StoredNeighbour]]:
        """``meta.stored_neighbours`` through the cache: what this generation read already,
        and the rest in one lookup (a memory with no row, gone mid-flight, has no entry)."""
        cached = self.cache.neighbours
        near: dict[str, list[StoredNeighbour]] = {}
        missing = []
        for memory_id in memory_ids:
            found = cached.get((namespace, generation, window, memory_id))
            if found is None:
                missing.append(memory_id)
            else:
                near[memory_id] = found
        if missing:
            fetched = self.meta.stored_neighbours(namespace, missing, window)
            for memory_id, found in fetched.items():
                cached.put((namespace, generation, window, memory_id), found)
            near.update(fetched)
        return {m: near[m] for m in memory_ids if m in near}

    def _similarities(
        self, namespace: str, generation: int, model: str, others: dict[str, list[str]]
    ) -> dict[tuple[str, str], float]:
        """``index.dense_similarities`` through the cache: the pairs this generation scored
        already, and the rest in one engine call (a pair it gives no cosine stays without)."""
        cached = self.cache.cosines
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
            scored = self.index.dense_similarities(missing, model)
            for hit, rest in missing.items():
                for other in rest:
                    value = scored.get((hit, other), NO_COSINE)
                    cached.put((namespace, generation, model, hit, other), value)
                    if not math.isnan(value):
                        out[(hit, other)] = value
        return out

    def _held_back(
        self,
        candidates: Sequence[Candidate],
        stale: Sequence[Candidate],
        limit: int,
        boost: Callable[[Candidate], float],
        floor: float,
    ) -> set[str]:
        """The stale memories include_stale=true would have put in these results: the
        stale candidates within the top ``limit`` of all candidates (fused order with the
        recency boost), not every stale memory the index returned (the dense channel returns
        something for any query)."""
        if not stale:
            return set()
        # Copies in fused order: ordering writes scores into the candidates it ranks.
        pool = sorted(
            (replace(c, rerank_score=None) for c in [*candidates, *stale]),
            key=lambda c: c.fused_rank,
        )
        cfg = self.settings.retrieval
        everything, _ = order_candidates(
            pool,
            rerank_top_n=0,
            rerank=None,
            boost_of=boost,
            base_k=cfg.fused_base_k,
            max_boost=max_boost(self.settings.recency),
            min_score=floor,
            by_relevance=cfg.mode == "hybrid" and cfg.fusion == "relevance",
        )
        stale_ids = {c.memory_id for c in stale}
        return {c.memory_id for c in everything[:limit] if c.memory_id in stale_ids}

    def _result(
        self,
        memory: Memory,
        candidate: Candidate,
        fresh: Freshness,
        explain: bool,
        now: datetime,
    ) -> RecallHit:
        return RecallHit(
            memory=memory,
            score=candidate.final_score,
            freshness=fresh,
            effective_confidence=effective_confidence(memory, now, self.settings.staleness)
            if memory.type is MemoryType.SEMANTIC
            else None,
            explain=candidate.explain() if explain else None,
        )

    def _flag_contradictions(
        self,
        namespace: str,
        memories: Sequence[Memory],
        results: list[RecallHit],
        as_of: datetime | None = None,
    ) -> list[tuple[Memory, list[str]]]:
        """Layer 4: single-valued facts sharing subject+predicate with other objects, all valid
        now (or all valid at ``as_of``: a value that only began later contradicts nothing then).

        Flags the results in place; returns the contradicting facts missing from the results,
        each with the result ids it contradicts."""

        def valid(fact: Memory) -> bool:
            if as_of is None:
                return fact.t_invalid is None
            start = fact.t_valid or fact.event_time
            return start <= as_of and (fact.t_invalid is None or fact.t_invalid > as_of)

        by_id = {r.memory.id: r for r in results}
        missing: dict[str, tuple[Memory, list[str]]] = {}
        seen: dict[tuple[int, str], list[Memory]] = {}
        for memory in memories:
            if (
                memory.type is not MemoryType.SEMANTIC
                or not valid(memory)
                or memory.multi_valued
                or memory.subject_entity_id is None
                or memory.predicate_canonical is None
            ):
                continue
            group_key = (memory.subject_entity_id, memory.predicate_canonical)
            if group_key not in seen:
                seen[group_key] = [
                    f
                    for f in self.meta.facts_for_predicate(namespace, *group_key)
                    if valid(f) and not f.multi_valued
                ]
            group = seen[group_key]
            others = [
                f
                for f in group
                if f.id != memory.id
                and conflicts.normalize_object(f.object or "")
                != conflicts.normalize_object(memory.object or "")
            ]
            if others:
                by_id[memory.id].contradicts = sorted(f.id for f in others)
                for other in others:
                    if other.id not in by_id:
                        missing.setdefault(other.id, (other, []))[1].append(memory.id)
        return [(m, sorted(ids)) for _, (m, ids) in sorted(missing.items())]


def _ranks(hits: Sequence[IndexHit]) -> dict[str, int]:
    ranks: dict[str, int] = {}
    for hit in hits:
        if hit.memory_id and hit.memory_id not in ranks:
            ranks[hit.memory_id] = len(ranks) + 1
    return ranks
