"""The retrieval stage's output, what the recall cache keeps: the candidates in fused order, one
record per candidate carrying its evidence."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Scored:
    """One candidate of the fused list and its evidence."""

    memory_id: str
    # The fused score (RRF, or the calibrated relevance with score fusion) and the channels'
    # own ranks (explain; None where a channel did not rank it, or without explain).
    score: float
    dense_rank: int | None
    bm25_rank: int | None
    # Calibrated relevance (relevance.py) after context credit (neighbours.py).
    relevance: float = 0.0
    # Its evidence: cosine, raw BM25 (None where a channel did not return the memory) and
    # normalised BM25.
    cosine: float | None = None
    bm25: float | None = None
    bm25_norm: float = 0.0
    # Late-interaction evidence (mean MaxSim), where that channel scored the memory.
    late: float | None = None
    # With late interaction, the two-channel relevance too: what the floor and the answer gate
    # judge (None without late interaction).
    gate_relevance: float | None = None
    # A context neighbour that joined the candidates: the hit it came by (neighbours.py).
    neighbour_of: str | None = None
    # The hit whose context credit raised its relevance: never ordered above it.
    context_of: str | None = None
    # Ranked by BM25, but under the relative floor: not counted in the fused score (explain).
    below_bm25_floor: bool = False
    # The cross-encoder's score, once a recall asked for it (kept with the cache entry).
    rerank_score: float | None = None


@dataclass
class Retrieved:
    """The candidates in fused order, and the same records by memory id."""

    candidates: list[Scored]
    by_id: dict[str, Scored] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.by_id = {record.memory_id: record for record in self.candidates}
