"""Ports: the small interfaces core depends on; ``ferrex.embed`` and ``ferrex.store`` implement
them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

import numpy as np

# --------------------------------------------------------------------------- vectors

Vector = np.ndarray


@dataclass(frozen=True)
class SparseVec:
    indices: tuple[int, ...]
    values: tuple[float, ...]

    def __bool__(self) -> bool:
        return bool(self.indices)


@dataclass(frozen=True)
class ModelInfo:
    """Identity of an embedding model, pinned in the store at creation."""

    name: str
    dimension: int
    max_tokens: int
    source: str  # "fastembed", "local", "bundled"
    variant: str = ""

    @property
    def pin(self) -> str:
        return f"{self.name}{'@' + self.variant if self.variant else ''}"


class Embedder(Protocol):
    """Dense text embeddings (documents with ``embed``, queries with ``query_embed``)."""

    @property
    def info(self) -> ModelInfo: ...

    @property
    def warnings(self) -> list[str]: ...

    def embed_documents(self, texts: Sequence[str]) -> list[Vector]: ...

    def embed_query(self, text: str) -> Vector: ...

    def count_tokens(self, text: str) -> int: ...

    def load(self) -> None: ...


class SparseEncoder(Protocol):
    """BM25 sparse vectors (Qdrant's own tokenizer, stemmer and stopwords)."""

    def encode_document(self, text: str) -> SparseVec: ...

    def encode_query(self, text: str) -> SparseVec: ...


class Reranker(Protocol):
    """Cross-encoder: raw relevance scores only (boosts live in core.retrieval)."""

    @property
    def available(self) -> bool: ...

    @property
    def name(self) -> str | None: ...

    @property
    def unavailable_reason(self) -> str | None: ...

    def score(self, query: str, documents: Sequence[str]) -> list[float]: ...

    def load(self) -> None: ...


# --------------------------------------------------------------------------- vector index


Validity = Literal["current", "all"]


@dataclass(frozen=True)
class IndexFilter:
    """Backend-neutral filter, built only from validated values."""

    namespace: str
    types: tuple[str, ...] = ()
    entity_ids: tuple[int, ...] | None = None
    time_after: datetime | None = None
    time_before: datetime | None = None
    validity: Validity = "current"
    as_of: datetime | None = None


@dataclass
class IndexPoint:
    point_id: str
    dense: Vector
    sparse: SparseVec
    payload: dict[str, Any]


@dataclass
class IndexHit:
    point_id: str
    memory_id: str
    score: float
    chunk: int = 0


@dataclass
class IndexStats:
    mode: str
    points: int
    details: dict[str, Any] = field(default_factory=dict)


class VectorIndex(Protocol):
    """The derived vector index (named dense ``dense`` cosine + sparse ``bm25`` with IDF)."""

    mode: str

    def ensure_collection(self, dimension: int) -> None: ...

    def upsert(self, points: Sequence[IndexPoint]) -> None: ...

    def delete_memories(self, memory_ids: Sequence[str]) -> None: ...

    def delete_points(self, point_ids: Sequence[str]) -> None: ...

    def set_payload(self, memory_id: str, payload: dict[str, Any]) -> None: ...

    def hybrid(
        self,
        dense: Vector,
        sparse: SparseVec,
        flt: IndexFilter,
        prefetch: int,
        limit: int,
        rrf_k: int,
        hnsw_ef: int,
    ) -> list[IndexHit]: ...

    def dense_search(
        self, dense: Vector, flt: IndexFilter, limit: int, hnsw_ef: int
    ) -> list[IndexHit]: ...

    def sparse_search(self, sparse: SparseVec, flt: IndexFilter, limit: int) -> list[IndexHit]: ...

    def points_by_memory(self) -> dict[str, list[str]]: ...

    def stats(self) -> IndexStats: ...

    def reset(self, dimension: int) -> None: ...

    def optimize(self) -> bool: ...

    def size_bytes(self) -> int: ...

    def close(self) -> None: ...
