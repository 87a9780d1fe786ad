"""Ports: the small interfaces core depends on; ``ferrex.embed`` and ``ferrex.store`` implement
them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

import numpy as np

from ferrex.core.memory import Memory

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


@dataclass(frozen=True)
class TokenEmbedding:
    """One model pass over a text: its dense (pooled) vector and the model's token vectors.

    ``tokens`` holds one unit row per token of the text (the last hidden state, special and
    padding tokens left out), ``words`` the word of the text each row belongs to (for dropping
    stop words); ``tokens`` is None for a model whose output is already pooled.
    """

    dense: Vector
    tokens: np.ndarray | None
    words: tuple[str, ...] = ()


class Embedder(Protocol):
    """Dense text embeddings (documents with ``embed``, queries with ``query_embed``)."""

    @property
    def info(self) -> ModelInfo: ...

    @property
    def warnings(self) -> list[str]: ...

    def embed_documents(self, texts: Sequence[str]) -> list[Vector]: ...

    def embed_query(self, text: str) -> Vector: ...

    def embed_documents_tokens(self, texts: Sequence[str]) -> list[TokenEmbedding]:
        """``embed_documents`` and each text's token vectors, from the same model pass."""
        ...

    def embed_query_tokens(self, text: str) -> TokenEmbedding:
        """``embed_query`` and the query's token vectors, from the same model pass."""
        ...

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

    def load(self, *, download: bool = True) -> None: ...


# --------------------------------------------------------------------------- vector index


Validity = Literal["current", "all"]

# A memory stored next to another (MetadataStore.stored_neighbours): (its id, offset from the
# other, its created_at, the other's created_at, current, whether the other asks a question, its
# type, the other's type).
StoredNeighbour = tuple[str, int, str, str, bool, bool, str, str]


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
    # Only points embedded by this model are compared (never mix models; PRME RFC-0005 §4.2).
    model: str | None = None
    # Only these memories (scoring known candidates in a channel that did not return them):
    # every point of ``memory_ids`` and the points ``point_ids`` (a memory indexed as one
    # point, looked up by its id: cheaper than matching the payload); either selects.
    memory_ids: tuple[str, ...] | None = None
    point_ids: tuple[str, ...] | None = None


@dataclass
class IndexPoint:
    point_id: str
    dense: Vector
    sparse: SparseVec
    payload: dict[str, Any]
    # The late-interaction multivector (pooled unit token vectors), or None.
    tokens: np.ndarray | None = None


@dataclass
class IndexHit:
    point_id: str
    memory_id: str
    score: float
    chunk: int = 0
    # The memory's type ("" where the index did not say): only a procedure has several points.
    memory_type: str = ""


@dataclass
class IndexStats:
    mode: str
    points: int
    details: dict[str, Any] = field(default_factory=dict)
    reason: str = ""  # why this mode was chosen (start-up log line, stats, doctor)


class VectorSearch(Protocol):
    """Searching the index (recall, dedup, neighbours): the only port a query needs."""

    @property
    def late_interaction(self) -> bool:
        """Whether the collection has the late-interaction channel (``tokens``)."""
        ...

    def search_batch(
        self,
        dense: Vector,
        sparse: SparseVec,
        searches: Sequence[tuple[str, IndexFilter, int]],
        hnsw_ef: int,
        tokens: np.ndarray | None = None,
    ) -> list[list[IndexHit]]:
        """Several searches of one query, ("dense" | "sparse" | "tokens", filter, limit) each,
        in ONE engine call; one list of hits per search, in order. A "tokens" search scores
        by MaxSim (the sum over the query's ``tokens`` of the best cosine with a point's)."""
        ...

    def dense_search(
        self, dense: Vector, flt: IndexFilter, limit: int, hnsw_ef: int
    ) -> list[IndexHit]: ...

    def dense_search_many(
        self, searches: Sequence[tuple[Vector, IndexFilter, int]], hnsw_ef: int
    ) -> list[list[IndexHit]]:
        """Several dense searches, (vector, filter, limit) each, in ONE engine call; one list
        of hits per search, in order, each what ``dense_search`` would return. (The engine
        evaluates a filter the searches share once: a bulk import's duplicate checks.)"""
        ...

    def sparse_search(self, sparse: SparseVec, flt: IndexFilter, limit: int) -> list[IndexHit]: ...

    def dense_similarities(
        self, others: Mapping[str, Sequence[str]], model: str
    ) -> dict[tuple[str, str], float]:
        """The dense cosine between each memory of ``others`` and each memory listed for it
        (their first chunks, both embedded by ``model``), by (memory, other); a pair the index
        does not hold for that model is left out."""
        ...


class IndexWrites(Protocol):
    """Writing points (the dual write, core/index/sync.py)."""

    def upsert(self, points: Sequence[IndexPoint]) -> None: ...

    def delete_memories(self, memory_ids: Sequence[str]) -> None: ...

    def delete_points(self, point_ids: Sequence[str]) -> None: ...

    def set_payload(self, memory_id: str, payload: dict[str, Any]) -> None: ...


class IndexAdmin(Protocol):
    """Administration: the collection, scans for doctor, stats, optimisation, size."""

    def ensure_collection(self, dimension: int, *, late_interaction: bool = False) -> None: ...

    def reset(self, dimension: int, *, late_interaction: bool = False) -> None: ...

    def points_by_memory(self) -> dict[str, list[str]]: ...

    def point_payloads(self, fields: Sequence[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every point's id and the named payload fields (a full scan, for doctor)."""
        ...

    def stats(self) -> IndexStats: ...

    def optimize(self) -> bool: ...

    def start_background_work(self) -> None:
        """Upkeep the engine does not do by itself, off the request path (a server: none)."""
        ...

    def size_bytes(self) -> int: ...

    def close(self) -> None: ...


class VectorIndex(VectorSearch, IndexWrites, IndexAdmin, Protocol):
    """The derived vector index (named dense ``dense`` cosine + sparse ``bm25`` with IDF, and
    where the adapter has it a ``tokens`` multivector compared by MaxSim), as the three ports
    above."""

    mode: str


# --------------------------------------------------------------------------- metadata store


@dataclass
class EntityRow:
    id: int
    namespace: str
    name: str
    display_name: str
    entity_type: str | None
    created_at: datetime
    updated_at: datetime


@dataclass
class JournalEntry:
    """One pending vector-index change of the dual write (the outbox)."""

    seq: int
    op: str
    memory_id: str
    namespace: str


@dataclass(frozen=True)
class MemoryCount:
    """A write-kept counter: memories of one type, current or not, pinned or not."""

    type: str
    current: bool
    pinned: bool
    n: int


@dataclass(frozen=True)
class ReviewBucket:
    """Current memories of one type and confidence created within one hour (``created_hour``,
    ``YYYY-MM-DDTHH`` in UTC) and last validated within one hour (None: never validated)."""

    type: str
    confidence: float
    created_hour: str
    validated_hour: str | None
    n: int


class Transactions(Protocol):
    """The database itself: transactions, versions, size, and scrubbing freed pages."""

    def close(self) -> None: ...

    @property
    def schema_version(self) -> int: ...

    def data_version(self) -> int: ...

    def transaction(self) -> AbstractContextManager[None]: ...

    def savepoint(self) -> AbstractContextManager[None]: ...

    def size_bytes(self) -> int: ...

    def scrub(self) -> None: ...


class StoreMeta(Protocol):
    """Key-value metadata of the store (the model pin, rebuild markers: core/index/pins.py)."""

    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str) -> None: ...

    def delete_meta(self, key: str) -> None: ...

    def all_meta(self) -> dict[str, str]: ...


class MemoryRows(Protocol):
    """Memories by id: write, read, rewrite, delete, and whole-store scans."""

    def insert_memory(self, memory: Memory) -> None: ...

    def replace_memory(self, memory: Memory) -> None: ...

    def rewrite_text(self, memory: Memory) -> None: ...

    def memory_exists(self, memory_id: str) -> bool: ...

    def get_memory(self, memory_id: str) -> Memory | None: ...

    def get_memories(self, memory_ids: Sequence[str]) -> dict[str, Memory]: ...

    def superseding(self, memory_ids: Sequence[str]) -> set[str]:
        """Which of ``memory_ids`` superseded another memory (an earlier value of a fact)."""
        ...

    def update_memory_fields(self, memory_id: str, **fields: Any) -> None: ...

    def delete_memories(self, memory_ids: Sequence[str]) -> None: ...

    def existing_ids(self, memory_ids: Sequence[str], namespace: str | None = None) -> set[str]: ...

    def iter_memories(self, namespace: str | None = None, batch: int = 500) -> Iterator[Memory]: ...

    def all_memory_ids(self) -> dict[str, int]: ...

    def namespaces(self) -> list[str]: ...

    def data_sizes(self, memory_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
        """memory id -> (bytes of its text fields, vector points), for the storage budget."""
        ...

    def data_totals(self) -> tuple[int, int, int]:
        """(memories, bytes of their text fields, vector points) of the whole store."""
        ...


class FactQueries(Protocol):
    """Facts and their history: current values, superseded ones, contradictions, citations."""

    def current_facts(self, namespace: str, subject_entity_id: int) -> list[Memory]: ...

    def facts_for_predicate(
        self, namespace: str, subject_entity_id: int, predicate_canonical: str
    ) -> list[Memory]: ...

    def predicates_of_subject(self, namespace: str, subject_entity_id: int) -> list[str]: ...

    def facts_superseded_by(self, namespace: str, memory_ids: Sequence[str]) -> list[Memory]: ...

    def contradiction_groups(
        self, namespace: str, limit: int | None = None
    ) -> list[list[Memory]]: ...

    def count_contradictions(self, namespace: str) -> int: ...

    def referencing_sources(self, memory_ids: Sequence[str]) -> set[str]: ...


class ProcedureQueries(Protocol):
    """Procedure versions."""

    def procedure_versions(self, namespace: str, name: str) -> list[Memory]: ...

    def named_procedures(self, namespace: str) -> list[Memory]: ...


RowValidity = Literal["current", "ended", "all"]
BrowseSort = Literal["date", "stored", "type", "first"]


class BrowseQueries(Protocol):
    """Every memory of a namespace for a human to page through (``ferrex ui``)."""

    def browse_memories(
        self, namespace: str, *, types: Sequence[str], validity: RowValidity, sort: BrowseSort
    ) -> list[Memory]:
        """Without entity links; ``sort``: newest event first (``date``), newest stored first
        (``stored``), by type then newest event (``type``), oldest stored first (``first``)."""
        ...


class LifecycleQueries(Protocol):
    """What reflect, stats, retention and the storage budget read: counters, review buckets,
    the current, ended and evictable memories."""

    def current_memories(self, namespace: str) -> list[Memory]: ...

    def ended_unpinned(self, namespace: str) -> list[Memory]: ...

    def evictable(self) -> list[Memory]: ...

    def count_memories(self, namespace: str | None = None) -> int: ...

    def count_by_type(self, namespace: str) -> dict[str, int]: ...

    def memory_counts(self, namespace: str | None) -> list[MemoryCount]: ...

    def review_buckets(self, namespace: str) -> list[ReviewBucket]: ...

    def memories_in_bucket(self, namespace: str, bucket: ReviewBucket) -> list[Memory]: ...

    def recent_memories(self, namespace: str, limit: int) -> list[Memory]: ...


class NeighbourQueries(Protocol):
    """Context neighbours: memories stored next to a hit in the same sitting."""

    def stored_neighbours(
        self, namespace: str, memory_ids: Sequence[str], window: int
    ) -> dict[str, list[StoredNeighbour]]: ...


class AccessLog(Protocol):
    """Access bookkeeping of recall (last accessed, access count)."""

    def bump_access(
        self, memory_ids: Sequence[str], at: datetime, counts: dict[str, int]
    ) -> None: ...


class EntityRows(Protocol):
    """Entities, their aliases and alias candidates, and their links to memories."""

    def entity_by_name(self, namespace: str, name: str) -> EntityRow | None: ...

    def entity(self, entity_id: int) -> EntityRow | None: ...

    def entities_by_ids(self, entity_ids: Sequence[int]) -> dict[int, EntityRow]: ...

    def entity_names(self, namespace: str) -> list[tuple[str, int]]: ...

    def entity_embeddings(self, namespace: str) -> tuple[list[int], np.ndarray | None]: ...

    def create_entity(
        self,
        namespace: str,
        name: str,
        display_name: str,
        embedding: np.ndarray | None,
        at: datetime,
        entity_type: str | None = None,
    ) -> int: ...

    def insert_entity_row(self, row: dict[str, Any]) -> int: ...

    def set_entity_embedding(self, entity_id: int, embedding: np.ndarray) -> None: ...

    def touch_entity(self, entity_id: int, at: datetime) -> None: ...

    def add_alias(
        self, namespace: str, alias: str, entity_id: int, method: str, score: float, at: datetime
    ) -> None: ...

    def aliases_of(self, entity_ids: Sequence[int]) -> dict[int, list[dict[str, Any]]]: ...

    def add_alias_candidate(
        self, namespace: str, name: str, entity_id: int, score: float, at: datetime
    ) -> None: ...

    def alias_candidates(self, namespace: str, limit: int) -> list[dict[str, Any]]: ...

    def link_entities(self, memory_id: str, entity_ids: Iterable[int]) -> None: ...

    def orphan_entities(self, entity_ids: Sequence[int]) -> list[int]: ...

    def delete_entities(self, entity_ids: Sequence[int]) -> None: ...

    def count_entities(self, namespace: str) -> int: ...

    def inactive_entities(
        self, namespace: str, before: datetime, limit: int
    ) -> list[dict[str, Any]]: ...

    def entities_of_namespace(self, namespace: str | None) -> list[dict[str, Any]]: ...

    def candidates_of_namespace(self, namespace: str | None) -> list[dict[str, Any]]: ...


class Journal(Protocol):
    """The dual write's outbox: index changes not yet applied (core/index/sync.py)."""

    def journal_add(self, op: str, memory_id: str, namespace: str, at: datetime) -> int: ...

    def journal_done(self, seqs: Sequence[int]) -> None: ...

    def journal_pending(self, limit: int | None = None) -> list[JournalEntry]: ...

    def journal_backlog(self) -> int: ...


class CallKeys(Protocol):
    """Exactly-once calls between processes: the answer recorded under a forwarded write's
    idempotency key (``core/call_keys.py``)."""

    def call_answer(self, key: str) -> str | None: ...

    def record_call(
        self, key: str, op: str, namespace: str, answer: str, at: datetime, forget_before: datetime
    ) -> None: ...


class AuditLog(Protocol):
    """The audit log of every state transition."""

    def audit(
        self,
        namespace: str,
        action: str,
        at: datetime,
        memory_id: str | None = None,
        other_id: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None: ...

    def insert_audit_row(self, row: Sequence[Any]) -> None: ...

    def audit_entries(
        self, namespace: str | None = None, action: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]: ...

    def count_audit(self, namespace: str, action: str) -> int: ...

    def last_audit_at(self, namespace: str, action: str) -> str | None: ...

    def audit_details(
        self, after: int = 0, seqs: Sequence[int] = ()
    ) -> Iterator[tuple[int, dict[str, Any]]]: ...

    def set_audit_detail(self, seq: int, detail: dict[str, Any]) -> None: ...


class TextWrites(Protocol):
    """What ``doctor``'s secret scan reads again: memory texts and audit details written since
    a position. ``start`` records from now on: (already did, last write, last audit row)."""

    def text_writes_start(self) -> tuple[bool, int, int]: ...

    def text_writes_since(self, position: int) -> tuple[list[str], list[int]]: ...

    def text_writes_forget(self, position: int) -> None: ...


class MetadataStore(
    BrowseQueries,
    CallKeys,
    Transactions,
    StoreMeta,
    MemoryRows,
    FactQueries,
    ProcedureQueries,
    LifecycleQueries,
    NeighbourQueries,
    AccessLog,
    EntityRows,
    Journal,
    AuditLog,
    TextWrites,
    Protocol,
):
    """The source of truth: memories, entities, the dual-write journal and the audit log, as
    the narrow ports above (a use case may depend on only the ones it needs).

    Implemented by ``ferrex.store.sqlite.SqliteStore``.
    """
