"""QdrantIndex: the vector index on a Qdrant server (``--qdrant-url``) through ``qdrant-client``.

Same collection schema as the embedded engine. Also runs on ``QdrantClient(":memory:")`` (local
mode), which the tests use because no Qdrant server binary exists in this environment.
"""

from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from qdrant_client import QdrantClient, models

from ferrex.core.ids import point_id
from ferrex.core.indexing import (
    DATETIME_FIELDS,
    INTEGER_FIELDS,
    KEYWORD_FIELDS,
    vector_floats,
)
from ferrex.core.ports import IndexFilter, IndexHit, IndexPoint, IndexStats, SparseVec, Vector
from ferrex.core.retrieval import hit_order

DENSE = "dense"
SPARSE = "bm25"
COLLECTION = "ferrex"
CONNECT_TIMEOUT_SECONDS = 3
_RETURNED_FIELDS = ["memory_id", "chunk", "type"]


class QdrantUnreachableError(Exception):
    """The configured Qdrant server did not answer."""

    def __init__(self, url: str) -> None:
        super().__init__(f"error: cannot connect to Qdrant at {url} — is it running?")
        self.url = url


def connect(url: str, api_key: str | None = None) -> QdrantClient:
    """One connection attempt with a 3-second timeout (the spec's fail-fast rule)."""
    try:
        client = QdrantClient(
            url=url, api_key=api_key, timeout=CONNECT_TIMEOUT_SECONDS, check_compatibility=False
        )
        client.get_collections()
    except Exception as exc:
        raise QdrantUnreachableError(url) from exc
    return client


def fail_fast(url: str, api_key: str | None = None) -> QdrantClient:
    """Connect or print the spec's exact message to stderr and exit non-zero."""
    try:
        return connect(url, api_key)
    except QdrantUnreachableError as exc:
        sys.stderr.write(f"{exc}\n")
        raise SystemExit(2) from exc


class QdrantIndex:
    """Vector index on any ``QdrantClient`` (server or local mode)."""

    def __init__(
        self,
        client: QdrantClient,
        collection: str = COLLECTION,
        mode: str = "external",
        *,
        reason: str = "",
        details: dict[str, Any] | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self.client = client
        self.collection = collection
        self.mode = mode
        self.reason = reason
        self.details = details or {}  # e.g. the sidecar's pid and ports
        self._on_close = on_close
        self._lock = threading.RLock()
        self._scoped_idf = True

    # ------------------------------------------------------------------ schema

    def _exists(self) -> bool:
        return bool(self.client.collection_exists(self.collection))

    @property
    def late_interaction(self) -> bool:
        """Not on a Qdrant server yet (docs/recall.md): recall works without the channel."""
        return False

    def ensure_collection(self, dimension: int, *, late_interaction: bool = False) -> None:
        with self._lock:
            if self._exists():
                return
            self.client.create_collection(
                self.collection,
                vectors_config={
                    DENSE: models.VectorParams(size=dimension, distance=models.Distance.COSINE)
                },
                sparse_vectors_config={
                    SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)
                },
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # local mode: "payload indexes have no effect"
                for name in KEYWORD_FIELDS:
                    self.client.create_payload_index(
                        self.collection, name, field_schema=models.PayloadSchemaType.KEYWORD
                    )
                for name in DATETIME_FIELDS:
                    self.client.create_payload_index(
                        self.collection, name, field_schema=models.PayloadSchemaType.DATETIME
                    )
                for name in INTEGER_FIELDS:
                    self.client.create_payload_index(
                        self.collection, name, field_schema=models.PayloadSchemaType.INTEGER
                    )

    # ------------------------------------------------------------------ writes

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        if not points:
            return
        structs = [
            models.PointStruct(
                id=p.point_id,
                vector={
                    DENSE: vector_floats(p.dense),
                    SPARSE: models.SparseVector(
                        indices=list(p.sparse.indices), values=list(p.sparse.values)
                    ),
                },
                payload=p.payload,
            )
            for p in points
        ]
        with self._lock:
            self.client.upsert(self.collection, points=structs, wait=True)

    def delete_memories(self, memory_ids: Sequence[str]) -> None:
        if not memory_ids or not self._exists():
            return
        selector = models.FilterSelector(
            filter=models.Filter(
                must=[
                    models.FieldCondition(
                        key="memory_id", match=models.MatchAny(any=list(memory_ids))
                    )
                ]
            )
        )
        with self._lock:
            self.client.delete(self.collection, points_selector=selector, wait=True)

    def delete_points(self, point_ids: Sequence[str]) -> None:
        if not point_ids or not self._exists():
            return
        with self._lock:
            self.client.delete(
                self.collection,
                points_selector=models.PointIdsList(points=list(point_ids)),
                wait=True,
            )

    def set_payload(self, memory_id: str, payload: dict[str, Any]) -> None:
        flt = models.Filter(
            must=[models.FieldCondition(key="memory_id", match=models.MatchValue(value=memory_id))]
        )
        with self._lock:
            self.client.set_payload(self.collection, payload=payload, points=flt, wait=True)

    # ------------------------------------------------------------------ reads

    def _sparse_params(self, flt: IndexFilter) -> models.SearchParams | None:
        if not self._scoped_idf:
            return None
        return models.SearchParams(idf=models.IdfCorpusParams(corpus=_namespace_filter(flt)))

    def search_batch(
        self,
        dense: Vector,
        sparse: SparseVec,
        searches: Sequence[tuple[str, IndexFilter, int]],
        hnsw_ef: int,
        tokens: Any = None,
    ) -> list[list[IndexHit]]:
        """Several searches of one query, ("dense" | "sparse", filter, limit) each, in ONE
        request; one list of hits per search, in order ("tokens": none, no such channel)."""
        if not searches or not self._exists():
            return [[] for _ in searches]
        asked = [s for s in searches if s[0] != "tokens"]
        if len(asked) < len(searches):
            found = iter(self.search_batch(dense, sparse, asked, hnsw_ef) if asked else [])
            return [[] if s[0] == "tokens" else next(found) for s in searches]
        vector = vector_floats(dense) if any(c == "dense" for c, _, _ in searches) else []
        requests = []
        for channel, flt, limit in searches:
            if channel == "dense":
                requests.append(
                    models.QueryRequest(
                        query=vector,
                        using=DENSE,
                        limit=limit,
                        filter=_filter(flt),
                        params=models.SearchParams(hnsw_ef=hnsw_ef),
                        with_payload=_RETURNED_FIELDS,
                    )
                )
            else:
                requests.append(
                    models.QueryRequest(
                        query=_sparse(sparse),
                        using=SPARSE,
                        limit=limit,
                        filter=_filter(flt),
                        params=self._sparse_params(flt),
                        with_payload=_RETURNED_FIELDS,
                    )
                )
        return [_hits(response.points) for response in self._batch(requests)]

    def _batch(self, requests: list[models.QueryRequest]) -> list[models.QueryResponse]:
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Local mode performs exact")
                return list(self.client.query_batch_points(self.collection, requests=requests))
        except Exception:
            if not self._scoped_idf:
                raise
            # Older servers do not know namespace-scoped IDF: fall back to collection IDF.
            self._scoped_idf = False
            plain = [
                r.model_copy(update={"params": None}) if r.using == SPARSE else r for r in requests
            ]
            return list(self.client.query_batch_points(self.collection, requests=plain))

    def _query(self, **kwargs: Any) -> list[models.ScoredPoint]:
        try:
            with warnings.catch_warnings():
                # local mode: "exact search, search_params have no effect" is expected
                warnings.filterwarnings("ignore", message="Local mode performs exact")
                result = self.client.query_points(
                    self.collection, with_payload=_RETURNED_FIELDS, **kwargs
                )
        except Exception:
            if not self._scoped_idf:
                raise
            # Older servers do not know namespace-scoped IDF: fall back to collection IDF.
            self._scoped_idf = False
            kwargs = _without_idf(kwargs)
            result = self.client.query_points(
                self.collection, with_payload=_RETURNED_FIELDS, **kwargs
            )
        return list(result.points)

    def dense_search(
        self, dense: Vector, flt: IndexFilter, limit: int, hnsw_ef: int
    ) -> list[IndexHit]:
        if not self._exists():
            return []
        return _hits(
            self._query(
                query=vector_floats(dense),
                using=DENSE,
                query_filter=_filter(flt),
                limit=limit,
                search_params=models.SearchParams(hnsw_ef=hnsw_ef),
            )
        )

    def dense_search_many(
        self, searches: Sequence[tuple[Vector, IndexFilter, int]], hnsw_ef: int
    ) -> list[list[IndexHit]]:
        if not searches or not self._exists():
            return [[] for _ in searches]
        requests = [
            models.QueryRequest(
                query=vector_floats(dense),
                using=DENSE,
                limit=limit,
                filter=_filter(flt),
                params=models.SearchParams(hnsw_ef=hnsw_ef),
                with_payload=_RETURNED_FIELDS,
            )
            for dense, flt, limit in searches
        ]
        with warnings.catch_warnings():  # dense only: no IDF fallback to try (``_batch``)
            warnings.filterwarnings("ignore", message="Local mode performs exact")
            found = self.client.query_batch_points(self.collection, requests=requests)
        return [_hits(response.points) for response in found]

    def sparse_search(self, sparse: SparseVec, flt: IndexFilter, limit: int) -> list[IndexHit]:
        if not self._exists() or not sparse:
            return []
        return _hits(
            self._query(
                query=_sparse(sparse),
                using=SPARSE,
                query_filter=_filter(flt),
                limit=limit,
                search_params=self._sparse_params(flt),
            )
        )

    def dense_similarities(
        self, others: Mapping[str, Sequence[str]], model: str
    ) -> dict[tuple[str, str], float]:
        wanted = {m: list(found) for m, found in others.items() if found}
        if not wanted or not self._exists():
            return {}
        ids = set(wanted) | {o for found in wanted.values() for o in found}
        owner = {point_id(m): m for m in ids}
        records = self.client.retrieve(
            self.collection, list(owner), with_payload=["model"], with_vectors=[DENSE]
        )
        vectors: dict[str, np.ndarray] = {}
        for record in records:
            found = record.vector
            dense = found.get(DENSE) if isinstance(found, dict) else None
            if dense is not None and (record.payload or {}).get("model") == model:
                vectors[owner[str(record.id)]] = np.asarray(dense, dtype=np.float32)
        return {
            (memory, other): float(np.dot(vectors[memory], vectors[other]))
            for memory, found in wanted.items()
            for other in found
            if memory in vectors and other in vectors
        }

    def points_by_memory(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for pid, payload in self.point_payloads(["memory_id"]):
            out.setdefault(str(payload.get("memory_id", "")), []).append(pid)
        return out

    def point_payloads(self, fields: Sequence[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        if not self._exists():
            return
        offset: Any = None
        while True:
            records, offset = self.client.scroll(
                self.collection, limit=1000, offset=offset, with_payload=list(fields)
            )
            for record in records:
                yield str(record.id), dict(record.payload or {})
            if offset is None or not records:
                return

    def stats(self) -> IndexStats:
        if not self._exists():
            return IndexStats(
                mode=self.mode,
                points=0,
                details={"initialised": False, **self.details},
                reason=self.reason,
            )
        count = self.client.count(self.collection, exact=True).count
        return IndexStats(
            mode=self.mode,
            points=int(count),
            details={"collection": self.collection, "late_interaction": False, **self.details},
            reason=self.reason,
        )

    def reset(self, dimension: int, *, late_interaction: bool = False) -> None:
        with self._lock:
            if self._exists():
                self.client.delete_collection(self.collection)
            self.ensure_collection(dimension)

    def optimize(self) -> bool:
        return False  # a Qdrant server optimizes by itself

    def start_background_work(self) -> None:
        return None  # likewise: nothing to build on the client side

    def size_bytes(self) -> int:
        return 0  # not measurable from the client side

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            if self._on_close is not None:
                on_close, self._on_close = self._on_close, None
                on_close()  # e.g. stop the sidecar when this process is the last one


def _sparse(vec: SparseVec) -> models.SparseVector:
    return models.SparseVector(indices=list(vec.indices), values=list(vec.values))


def _without_idf(kwargs: dict[str, Any]) -> dict[str, Any]:
    out = dict(kwargs)
    if (
        "search_params" in out
        and out["search_params"] is not None
        and out["search_params"].idf is not None
    ):
        out["search_params"] = None
    if "prefetch" in out:
        out["prefetch"] = [
            p.model_copy(update={"params": None}) if p.using == SPARSE else p
            for p in out["prefetch"]
        ]
    return out


def _hits(points: Sequence[models.ScoredPoint]) -> list[IndexHit]:
    hits = [
        IndexHit(
            point_id=str(p.id),
            memory_id=str((p.payload or {}).get("memory_id", "")),
            score=float(p.score),
            chunk=int((p.payload or {}).get("chunk", 0) or 0),
            memory_type=str((p.payload or {}).get("type", "")),
        )
        for p in points
    ]
    return sorted(hits, key=hit_order)


def _namespace_filter(flt: IndexFilter) -> models.Filter:
    return models.Filter(
        must=[models.FieldCondition(key="namespace", match=models.MatchValue(value=flt.namespace))]
    )


def _filter(flt: IndexFilter) -> models.Filter:
    must: list[Any] = [
        models.FieldCondition(key="namespace", match=models.MatchValue(value=flt.namespace))
    ]
    chosen: list[Any] = []
    if flt.memory_ids is not None:
        chosen.append(
            models.FieldCondition(key="memory_id", match=models.MatchAny(any=list(flt.memory_ids)))
        )
    if flt.point_ids is not None:
        chosen.append(models.HasIdCondition(has_id=list(flt.point_ids)))
    if chosen:
        must.append(chosen[0] if len(chosen) == 1 else models.Filter(should=chosen))
    if flt.model is not None:
        must.append(models.FieldCondition(key="model", match=models.MatchValue(value=flt.model)))
    if flt.types:
        must.append(models.FieldCondition(key="type", match=models.MatchAny(any=list(flt.types))))
    if flt.entity_ids is not None:
        values = [str(e) for e in flt.entity_ids] or ["__none__"]
        must.append(models.FieldCondition(key="entities", match=models.MatchAny(any=values)))
    current = models.IsEmptyCondition(is_empty=models.PayloadField(key="t_invalid"))
    ranged = flt.time_after is not None or flt.time_before is not None
    if ranged:
        after = flt.time_after
        before = flt.time_before
        semantic = models.FieldCondition(key="type", match=models.MatchValue(value="semantic"))
        # Events and procedures: their time inside the range (and current, unless asked).
        others: list[Any] = [
            models.FieldCondition(key="time", range=models.DatetimeRange(gte=after, lte=before))
        ]
        if flt.as_of is None and flt.validity == "current":
            others.append(current)
        # Facts: valid at some moment of the range, superseded since or not (see edge.py).
        facts: list[Any] = [semantic]
        if before is not None:
            facts.append(
                models.FieldCondition(key="t_valid", range=models.DatetimeRange(lte=before))
            )
        if after is not None:
            facts.append(
                models.Filter(
                    should=[
                        current,
                        models.FieldCondition(
                            key="t_invalid", range=models.DatetimeRange(gt=after)
                        ),
                    ]
                )
            )
        must.append(
            models.Filter(
                should=[
                    models.Filter(must=others, must_not=[semantic]),
                    models.Filter(must=facts),
                ]
            )
        )
    if flt.as_of is not None:
        moment = flt.as_of
        must.append(models.FieldCondition(key="t_valid", range=models.DatetimeRange(lte=moment)))
        must.append(
            models.Filter(
                should=[
                    models.IsEmptyCondition(is_empty=models.PayloadField(key="t_invalid")),
                    models.FieldCondition(key="t_invalid", range=models.DatetimeRange(gt=moment)),
                ]
            )
        )
    elif flt.validity == "current" and not ranged:
        # "Empty" = null or absent: a payload refresh with t_invalid=None may drop the key.
        must.append(current)
    return models.Filter(must=must)
