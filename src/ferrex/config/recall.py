"""Recall tuning: retrieval channels and fusion, recency, relevance models, the answer gate,
neighbours, feedback, the recall cache (docs/recall.md, docs/configuration.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
)

from ferrex.config.base import (
    Section,
)


class RecencyCurve(Section):
    """recency_boost = 1 + amplitude * 2^(-age_days / half_life_days)."""

    amplitude: float = Field(ge=0, le=5)
    half_life_days: float = Field(ge=0)


class RecencyConfig(Section):
    episodic: RecencyCurve = Field(
        default_factory=lambda: RecencyCurve(amplitude=0.3, half_life_days=30)
    )
    semantic: RecencyCurve = Field(
        default_factory=lambda: RecencyCurve(amplitude=0.15, half_life_days=180)
    )
    procedural: RecencyCurve = Field(
        default_factory=lambda: RecencyCurve(amplitude=0.0, half_life_days=0)
    )


class RelevanceModel(Section):
    """relevance = sigmoid(bias + dense x cosine + bm25 x normalised BM25 + late x MaxSim)
    (core/recall/relevance.py; ``late`` counts only where the late-interaction channel is)."""

    # Fitted by bench/calibrate.py on LoCoMo dev + SciFact dev candidates (docs/recall.md).
    bias: float = -4.669
    dense: float = 7.010
    bm25: float = 8.730
    late: float = 0.0


def _late_relevance() -> RelevanceModel:
    # Fitted by ``bench/calibrate.py --late`` on the dev dumps with the channel (docs/recall.md).
    return RelevanceModel(bias=-5.436, dense=7.051, bm25=9.066, late=1.511)


class LateInteractionConfig(Section):
    """The late-interaction channel (core/index/late_interaction.py). ``enabled`` at index time
    stores each point's pooled token vectors (``tokens`` of them at most; changing it takes
    ``ferrex rebuild-index``); at query time it scores the candidates by MaxSim when the index
    has the channel. Off: recall uses ``retrieval.relevance`` alone."""

    enabled: bool = True
    tokens: int = Field(default=18, ge=1, le=128)


class AnswerGate(Section):
    """Whether a recall has an answer at all (core/recall/relevance.py ``answers``): its best
    candidate must reach ``relevance`` (the calibrated score) or ``cosine`` (dense evidence
    alone, for a paraphrase sharing no word with the query). A 0 turns that half off; two 0s
    turn the gate off. Used in hybrid mode without a cross-encoder (whose probability the
    ``min_score`` floor already judges)."""

    relevance: float = Field(default=0.4, ge=0, le=1)
    cosine: float = Field(default=0.3, ge=0, le=1)


class NeighbourConfig(Section):
    """Context neighbours (core/recall/context.py); weight 0 turns them off. The defaults were
    chosen on both dev sets (docs/recall.md)."""

    weight: float = Field(default=0.5, ge=0, le=1)
    decay: float = Field(default=0.5, ge=0, le=1)
    window: int = Field(default=2, ge=1, le=5)
    gap_seconds: float = Field(default=3600.0, ge=0)
    top: int = Field(default=10, ge=1, le=200)
    # A neighbour is context only when it is about the same thing: the dense cosine between
    # it and the hit at least this (-1: any neighbour, no lookup).
    min_similarity: float = Field(default=0.35, ge=-1, le=1)
    # The memory stored right after a hit that asks a question (its answer) gets this credit,
    # whatever its cosine with the question (0: it is an ordinary neighbour; weight 0 turns
    # every neighbour's credit off, answers' too).
    answer_weight: float = Field(default=0.9, ge=0, le=1)


class FeedbackConfig(Section):
    """BM25 pseudo-relevance feedback (core/recall/feedback.py); weight 0 turns it off."""

    weight: float = Field(default=0.0, ge=0, le=2)
    docs: int = Field(default=5, ge=1, le=50)
    terms: int = Field(default=20, ge=1, le=200)


class RetrievalConfig(Section):
    # "hybrid" is the product; "dense" and "bm25" run one channel through the same pipeline
    # (benchmarks compare them side by side).
    mode: Literal["hybrid", "dense", "bm25"] = "hybrid"
    prefetch_limit: int = Field(default=30, ge=1, le=2000)
    rrf_k: int = Field(default=60, ge=1, le=1000)
    default_limit: int = Field(default=5, ge=1, le=200)
    max_limit: int = Field(default=200, ge=1, le=1000)
    rerank_top_n: int = Field(default=20, ge=0, le=200)
    fused_base_k: float = Field(default=5.0, gt=0, le=1000)
    # BM25 hits below this fraction of the query's best BM25 score are not fused (0 disables).
    bm25_relative_floor: float = Field(default=0.2, ge=0, lt=1)
    # BM25 evidence of a namespace with fewer memories is put on the scale of one this large:
    # IDF from a few dozen memories calls a word in 2% of them nearly unique (docs/recall.md).
    bm25_min_points: int = Field(default=500, ge=1, le=10_000_000)
    # How far, in logits of relevance, the recency boost may move a candidate: two whose
    # relevance odds differ more than e^margin are never reordered by age; 0 turns it off.
    recency_margin: float = Field(default=0.75, ge=0, le=10)
    # Logits of relevance a fact gains when it holds the kind of answer the question asks for
    # (where / who / when / how many: core/recall/answer_type.py); 0 turns it off.
    answer_type_bonus: float = Field(default=2.0, ge=0, le=10)
    # Logits of relevance a current fact that superseded an earlier value gains when the
    # question asks for the present state ("now", "these days": core/recall/current_state.py).
    current_state_bonus: float = Field(default=3.0, ge=0, le=10)
    # Logits of relevance an event gains when it happened in the period the question names
    # ("in early July", "in October 2023", "last week": core/recall/period.py).
    named_period_bonus: float = Field(default=2.0, ge=0, le=10)
    hnsw_ef: int = Field(default=128, ge=4, le=4096)
    # Embedded engine: build the dense HNSW index in a background process once this many
    # vectors lack it (0: never; brute-force search, exact, slower past ~20k memories).
    hnsw_build_min_unindexed: int = Field(default=20_000, ge=0)
    # Results whose relevance (before the recency boost) is below this are not returned: limit
    # is a maximum. 0 returns every candidate. Chosen on LoCoMo / SciFact dev (docs/recall.md).
    min_score: float = Field(default=0.08, ge=0, le=1)
    # A recall whose best candidate is weak on both kinds of evidence answers nothing.
    answer_gate: AnswerGate = Field(default_factory=AnswerGate)
    # How candidates are ordered without a cross-encoder: "relevance" (the calibrated score,
    # a score fusion of cosine and BM25) or "rrf" (reciprocal-rank fusion, k = rrf_k).
    fusion: Literal["relevance", "rrf"] = "relevance"
    relevance: RelevanceModel = Field(default_factory=RelevanceModel)
    # The relevance model used where the late-interaction channel scored the candidates.
    relevance_late: RelevanceModel = Field(default_factory=_late_relevance)
    late_interaction: LateInteractionConfig = Field(default_factory=LateInteractionConfig)
    neighbours: NeighbourConfig = Field(default_factory=NeighbourConfig)
    feedback: FeedbackConfig = Field(default_factory=FeedbackConfig)


class CacheConfig(Section):
    enabled: bool = True
    size: int = Field(default=256, ge=1, le=100_000)
