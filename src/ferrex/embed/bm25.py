"""BM25 sparse vectors from Qdrant's own implementation (``qdrant_edge.Bm25``).

Same tokenizer, stemmer and stopwords as a Qdrant server; the collection applies IDF.
"""

from __future__ import annotations

import qdrant_edge as q

from ferrex.core.ports import SparseVec


class Bm25Encoder:
    """Document vectors carry term frequencies (k, b, avg_len); query vectors weight 1 per term."""

    def __init__(self, avg_len: float | None = None) -> None:
        # ``avg_len`` None keeps Qdrant's default (256), the same as a Qdrant server.
        self._model = q.Bm25(q.Bm25Config(avg_len=avg_len))

    def encode_document(self, text: str) -> SparseVec:
        vector = self._model.embed_document(text)
        return _merge(vector.indices, vector.values)

    def encode_query(self, text: str) -> SparseVec:
        vector = self._model.embed_query(text)
        return _merge(vector.indices, vector.values)


def _merge(indices: list[int], values: list[float]) -> SparseVec:
    """Sorted, de-duplicated (hash collisions add up) sparse vector."""
    merged: dict[int, float] = {}
    for index, value in zip(indices, values, strict=True):
        merged[int(index)] = merged.get(int(index), 0.0) + float(value)
    ordered = sorted(merged.items())
    return SparseVec(tuple(i for i, _ in ordered), tuple(v for _, v in ordered))
