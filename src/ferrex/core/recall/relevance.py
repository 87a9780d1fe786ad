"""Relevance: what a recall ``score`` means without a cross-encoder.

A candidate's relevance is a calibrated probability that it answers the query, from the two
pieces of evidence every memory has:

* ``dense`` — the cosine similarity of the query and memory embeddings (best chunk);
* ``bm25`` — the BM25 score of the memory for the query, normalised to the scale of the store:
  ``bm25 / (query_terms x idf_one(N))``, where ``idf_one(N) = ln(1 + (N - 0.5) / 1.5)`` is the
  IDF of a term found in one memory of a namespace of ``N`` points. A memory holding every query
  term once, each term rare, scores about 1; BM25's raw scale grows with the store and the
  query's length, this one does not.

    relevance = sigmoid(bias + w_dense x dense + w_bm25 x bm25_norm [+ w_late x late])

where the index has the late-interaction channel, ``late`` (core/index/late_interaction.py, the mean
MaxSim of the query's and the memory's token vectors) is a third piece of evidence, with weights
of its own (``retrieval.relevance_late``) fitted the same way.

The weights are a logistic regression fitted on the dev halves of LoCoMo and SciFact
(``bench/calibrate.py``; numbers in docs/recall.md). The rank of a candidate plays no part: the
best candidate of a question nothing answers still scores low, which is what the relevance floor
(``retrieval.min_score``) relies on.

The recency boost orders candidates within a margin of this relevance (core/recall/formulas.py
``order_key``); the floor compares the relevance before it, so a boost alone never lifts an
unrelated memory into the results.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ferrex.config.recall import AnswerGate, RecencyConfig, RelevanceModel, RetrievalConfig
from ferrex.core.ports import IndexHit
from ferrex.core.recall.formulas import sigmoid


def idf_one(points: int) -> float:
    """IDF (Qdrant's BM25 formula) of a term found in one of ``points`` documents."""
    n = max(1, points)
    return math.log(1.0 + (n - 0.5) / 1.5)


# The least a small store's BM25 evidence counts for (``bm25_norm``): on a store of a few
# memories a unique term's IDF is near 1, and what BM25 knows (a date term, a rare name) would
# otherwise count for nothing beside the cosine.
SMALL_STORE_FLOOR = 0.6


def small_store_factor(points: int, min_points: int) -> float:
    """How much a namespace of ``points`` memories' BM25 evidence counts: a unique term's IDF
    there over its IDF in ``min_points`` memories, at least ``SMALL_STORE_FLOOR``; 1 from
    ``min_points`` on."""
    if points >= min_points:
        return 1.0
    return max(SMALL_STORE_FLOOR, idf_one(points) / idf_one(min_points))


def bm25_norm(score: float, query_weight: float, points: int, min_points: int = 1) -> float:
    """BM25 score on the store's scale (see module doc); 0 for no match. ``query_weight`` is
    the sum of the query vector's weights (its term count, unless feedback expanded it). A
    namespace of fewer than ``min_points`` memories counts its evidence for less
    (``small_store_factor``): the IDF of a small store compresses its range (a word in 2% of
    150 memories keeps 82% of a unique word's IDF, 35% in 100,000), so partial word overlap
    would count as strong evidence exactly where new users are."""
    if score <= 0 or query_weight <= 0:
        return 0.0
    factor = small_store_factor(points, min_points)
    return factor * score / (query_weight * idf_one(points))


def relevance(dense: float, bm25_normed: float, model: RelevanceModel, late: float = 0.0) -> float:
    """Calibrated relevance in (0, 1) from cosine similarity, normalised BM25 and (with its
    model) the late-interaction MaxSim."""
    return sigmoid(model.bias + model.dense * dense + model.bm25 * bm25_normed + model.late * late)


def answers(best_relevance: float, best_cosine: float, gate: AnswerGate) -> bool:
    """Whether a recall has an answer: its best candidate reaches the gate's relevance or its
    cosine. ``min_score`` judges each result; this judges the question. A question nothing in
    the store answers often has a candidate sharing one word with it (relevance up to ~0.38 in
    the tests' store) or a loosely related one (cosine up to ~0.25), rarely both above; the
    answerable dev questions of LoCoMo and SciFact all pass (docs/recall.md)."""
    if gate.relevance <= 0 and gate.cosine <= 0:
        return True  # the gate is off
    # A half set to 0 is off (it would pass everything), not the other half's veto.
    by_relevance = gate.relevance > 0 and best_relevance >= gate.relevance
    by_cosine = gate.cosine > 0 and best_cosine >= gate.cosine
    return by_relevance or by_cosine


def max_boost(config: RecencyConfig) -> float:
    """The largest recency boost any memory type can get (1 + the largest amplitude)."""
    curves = (config.episodic, config.semantic, config.procedural)
    return 1.0 + max((c.amplitude for c in curves if c.half_life_days > 0), default=0.0)


Evidence = tuple[float | None, float | None, float]  # (cosine, raw BM25, normalised BM25)


def evidence_of(
    memory_ids: Sequence[str],
    dense_hits: Sequence[IndexHit],
    bm25_hits: Sequence[IndexHit],
    *,
    query_weight: float,
    points: int,
    fetched: int,
    min_points: int = 1,
) -> dict[str, tuple[float, Evidence]]:
    """Each candidate's cosine as the relevance uses it, and its evidence (cosine, raw BM25,
    normalised BM25; None where a channel did not return it).

    Channels hold one hit per memory. A candidate one channel did not return gets that
    channel's evidence imputed: BM25 0 (it matched no term, or too weakly to be fetched), the
    cosine of the channel's last hit when the channel was cut at ``fetched`` (an upper bound),
    else 0.
    """
    dense = {hit.memory_id: hit.score for hit in dense_hits}
    bm25 = {hit.memory_id: hit.score for hit in bm25_hits}
    dense_floor = min(dense.values()) if dense and len(dense) >= fetched else 0.0
    out: dict[str, tuple[float, Evidence]] = {}
    for memory_id in memory_ids:
        cosine = dense.get(memory_id)
        raw = bm25.get(memory_id)
        normed = bm25_norm(raw or 0.0, query_weight, points, min_points)
        out[memory_id] = (dense_floor if cosine is None else cosine, (cosine, raw, normed))
    return out


def score_evidence(
    evidence: dict[str, tuple[float, Evidence]],
    model: RelevanceModel,
    late: dict[str, float] | None = None,
    without_late: RelevanceModel | None = None,
) -> dict[str, tuple[float, Evidence]]:
    """Relevance of each candidate from its evidence (``evidence_of``) and its evidence.

    ``late`` (memory id -> mean MaxSim) is given with the model fitted with it; a candidate the
    late channel did not score (no token vectors) is scored by ``without_late``, the
    two-channel model, rather than as a MaxSim of 0.
    """
    out: dict[str, tuple[float, Evidence]] = {}
    for memory_id, (cosine, found) in evidence.items():
        scored_late = late is not None and memory_id in late
        value = relevance(
            cosine,
            found[2],
            model if scored_late or without_late is None else without_late,
            late[memory_id] if late is not None and scored_late else 0.0,
        )
        out[memory_id] = (value, found)
    return out


def score(
    memory_ids: Sequence[str],
    dense_hits: Sequence[IndexHit],
    bm25_hits: Sequence[IndexHit],
    cfg: RetrievalConfig,
    *,
    query_weight: float,
    points: int,
    fetched: int,
    late: dict[str, float] | None,
) -> tuple[dict[str, tuple[float, Evidence]], dict[str, float]]:
    """The stage: every candidate's relevance and evidence (the model fitted with late
    interaction where ``late`` is given), and what the floor and the gate judge where that
    differs: the two-channel relevance on the BM25 scale of the store itself (their thresholds
    were chosen on it; ``bm25_min_points`` orders a small store's candidates, it does not decide
    whether one answers). Empty where it is the relevance itself."""

    def evidence_at(min_points: int) -> dict[str, tuple[float, Evidence]]:
        return evidence_of(
            memory_ids,
            dense_hits,
            bm25_hits,
            query_weight=query_weight,
            points=points,
            fetched=fetched,
            min_points=min_points,
        )

    evidence = evidence_at(cfg.bm25_min_points)
    model = cfg.relevance if late is None else cfg.relevance_late
    scored = score_evidence(evidence, model, late, without_late=cfg.relevance)
    rescaled = points < cfg.bm25_min_points
    if late is None and not rescaled:
        return scored, {}
    judged = evidence_at(1) if rescaled else evidence
    gate = {mid: value for mid, (value, _) in score_evidence(judged, cfg.relevance).items()}
    return scored, gate
