"""BM25 pseudo-relevance feedback: the first hits' terms join the query (RM3-style, no model).

    expanded = query + weight x mean(top docs' BM25 vectors), keeping the ``terms`` strongest
    feedback terms (the query's own terms always stay, with weight 1 plus their feedback)

The first hits of the fused list (both channels) are the feedback documents: a turn the dense
channel found brings its words to the lexical channel ("adopt" -> "shelter", "puppy"). One more
engine query (BM25 only). Measured in docs/recall.md; ``retrieval.feedback.weight`` 0 turns it
off.
"""

from __future__ import annotations

from collections.abc import Sequence

from ferrex.core.ports import SparseVec


def expand(query: SparseVec, docs: Sequence[SparseVec], weight: float, terms: int) -> SparseVec:
    """The query vector with the feedback documents' strongest terms added (see module doc)."""
    if not docs or weight <= 0:
        return query
    pooled: dict[int, float] = {}
    for doc in docs:
        top = max(doc.values, default=0.0)
        if top <= 0:
            continue
        for index, value in zip(doc.indices, doc.values, strict=True):
            pooled[index] = pooled.get(index, 0.0) + value / top / len(docs)
    strongest = sorted(pooled.items(), key=lambda item: (-item[1], item[0]))[:terms]
    merged = dict(zip(query.indices, query.values, strict=True))
    for index, value in strongest:
        merged[index] = merged.get(index, 0.0) + weight * value
    ordered = sorted(merged.items())
    return SparseVec(tuple(i for i, _ in ordered), tuple(v for _, v in ordered))
