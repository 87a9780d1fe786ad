"""QdrantIndex: the vector index on a Qdrant server (``--qdrant-url``, or the sidecar) through
``qdrant-client``.

Same collection schema and the same evidence as the embedded engine, the late-interaction
channel included (a ``tokens`` multivector compared by MaxSim, Qdrant >= 1.10; stored float16:
``qdrant_collection.py``). Also runs on ``QdrantClient(":memory:")`` (local mode), which the
tests use because no Qdrant server binary exists in this environment.
"""

from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import structlog
from qdrant_client import QdrantClient, models

from ferrex.config.engine import QdrantConfig
from ferrex.core.ids import point_id
from ferrex.core.index.points import (
    DATETIME_FIELDS,
    INTEGER_FIELDS,
    KEYWORD_FIELDS,
    vector_floats,
)
from ferrex.core.ports import IndexFilter, IndexHit, IndexPoint, IndexStats, SparseVec, Vector
from ferrex.core.recall.formulas import hit_order
from ferrex.store.qdrant_collection import (
    DENSE,
    SPARSE,
    TOKENS,
    TOKENS_DATATYPE,
    ServerFeatures,
    collection_request,
    dense_to_disk,
    has_tokens,
    no_multivectors,
    read_consistency,
    write_ordering,
)
from ferrex.store.qdrant_filters import namespace_filter, to_filter

log = structlog.get_logger("ferrex.index")

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
        config: QdrantConfig | None = None,
    ) -> None:
        self.client = client
        self.collection = collection
        self.mode = mode
        self.reason = reason
        self.details = details or {}  # e.g. the sidecar's pid and ports
        self._on_close = on_close
        self._lock = threading.RLock()
        self._scoped_idf = True
        self.config = config or QdrantConfig()
        # Reads ask the replicas for ``read_consistency``, writes are ordered and confirmed by
        # the collection's write consistency factor: read-after-write on a replicated collection.
        self._read = read_consistency(self.config)
        self._ordering = write_ordering(self.config)
        self._late: bool | None = None  # whether the collection has the channel (None: unread)
        self._features: ServerFeatures | None = None

    # ------------------------------------------------------------------ schema

    def _exists(self) -> bool:
        return bool(self.client.collection_exists(self.collection))

    @property
    def late_interaction(self) -> bool:
        """Whether the collection has the ``tokens`` multivector (read once from the server)."""
        if self._late is None:
            with self._lock:
                self._late = self._exists() and has_tokens(
                    self.client.get_collection(self.collection)
                )
        return self._late

    @property
    def features(self) -> ServerFeatures:
        """The server's version and what it lacks (asked once; local mode: the client's)."""
        if self._features is None:
            try:
                version: str | None = str(self.client.info().version)
            except Exception:  # an old server or a proxy without the root endpoint
                version = None
            self._features = ServerFeatures(version)
        return self._features

    def _lacks(self, what: str) -> None:
        """Say once (stderr, one line) what this server cannot do; stats lists it too."""
        if self.features.lacks(what):
            log.warning("qdrant server limitation", limitation=what)

    def ensure_collection(self, dimension: int, *, late_interaction: bool = False) -> None:
        with self._lock:
            if self._exists():
                if (
                    late_interaction
                    and not self.late_interaction
                    and not self.features.multivectors
                ):
                    self._lacks(no_multivectors(self.features.version))  # said at every start
                self._dense_to_disk()
                return
            late = late_interaction and self.features.multivectors
            if late_interaction and not late:
                self._lacks(no_multivectors(self.features.version))
            cluster = self.mode == "external"
            request = collection_request(
                dimension, late_interaction=late, config=self.config, cluster=cluster
            )
            try:
                self.client.create_collection(self.collection, **request)
            except Exception as exc:
                if not late or self._exists():
                    raise
                # A server that does not know multivectors refuses the whole request: the
                # collection without the channel, said once.
                self._lacks(no_multivectors(self.features.version, _first_line(exc)))
                late = False
                request = collection_request(
                    dimension, late_interaction=False, config=self.config, cluster=cluster
                )
                self.client.create_collection(self.collection, **request)
            self._late = late
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

    def _dense_to_disk(self) -> None:
        """Past ``qdrant.on_disk_vectors_from`` points, the dense vectors go to disk (checked at
        every open; local mode accepts the change and keeps computing in memory). A server that
        refuses it (an old version, a key without the right) is said once, like any limitation,
        and the store opens as it was: this saves memory, it decides nothing."""
        try:
            update = dense_to_disk(self.client.get_collection(self.collection), self.config)
            if update is not None:
                self.client.update_collection(self.collection, **update)
                log.info("qdrant: dense vectors moved to disk, an 8-bit copy kept in memory")
        except Exception as exc:  # the client raises its own, httpx's and grpc's errors
            self._lacks(f"dense vectors stay in memory: the server refused ({_first_line(exc)})")

    # ------------------------------------------------------------------ writes

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        if not points:
            return
        late = self.late_interaction
        structs = [
            models.PointStruct(id=p.point_id, vector=_vectors(p, late), payload=p.payload)
            for p in points
        ]
        with self._lock:
            self.client.upsert(self.collection, points=structs, wait=True, ordering=self._ordering)

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
            self.client.delete(
                self.collection, points_selector=selector, wait=True, ordering=self._ordering
            )

    def delete_points(self, point_ids: Sequence[str]) -> None:
        if not point_ids or not self._exists():
            return
        with self._lock:
            self.client.delete(
                self.collection,
                points_selector=models.PointIdsList(points=list(point_ids)),
                wait=True,
                ordering=self._ordering,
            )

    def set_payload(self, memory_id: str, payload: dict[str, Any]) -> None:
        flt = models.Filter(
            must=[models.FieldCondition(key="memory_id", match=models.MatchValue(value=memory_id))]
        )
        with self._lock:
            self.client.set_payload(
                self.collection, payload=payload, points=flt, wait=True, ordering=self._ordering
            )

    # ------------------------------------------------------------------ reads

    def _sparse_params(self, flt: IndexFilter) -> models.SearchParams | None:
        if not self._scoped_idf:
            return None
        return models.SearchParams(idf=models.IdfCorpusParams(corpus=namespace_filter(flt)))

    def search_batch(
        self,
        dense: Vector,
        sparse: SparseVec,
        searches: Sequence[tuple[str, IndexFilter, int]],
        hnsw_ef: int,
        tokens: np.ndarray | None = None,
    ) -> list[list[IndexHit]]:
        """Several searches of one query, ("dense" | "sparse" | "tokens", filter, limit) each,
        in ONE request; one list of hits per search, in order ("tokens" finds nothing without
        the channel or query tokens)."""
        if not searches or not self._exists():
            return [[] for _ in searches]
        late = tokens is not None and len(tokens) > 0 and self.late_interaction
        asked = [s for s in searches if s[0] != "tokens" or late]
        if len(asked) < len(searches):
            found = iter(self.search_batch(dense, sparse, asked, hnsw_ef, tokens) if asked else [])
            return [next(found) if s[0] != "tokens" or late else [] for s in searches]
        vector = vector_floats(dense) if any(c == "dense" for c, _, _ in searches) else []
        requests = []
        for channel, flt, limit in searches:
            if channel == "tokens":
                assert tokens is not None
                requests.append(
                    models.QueryRequest(
                        query=np.asarray(tokens, dtype=np.float32).tolist(),
                        using=TOKENS,
                        limit=limit,
                        filter=to_filter(flt),
                        with_payload=_RETURNED_FIELDS,
                    )
                )
            elif channel == "dense":
                requests.append(
                    models.QueryRequest(
                        query=vector,
                        using=DENSE,
                        limit=limit,
                        filter=to_filter(flt),
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
                        filter=to_filter(flt),
                        params=self._sparse_params(flt),
                        with_payload=_RETURNED_FIELDS,
                    )
                )
        return [_hits(response.points) for response in self._batch(requests)]

    def _batch(self, requests: list[models.QueryRequest]) -> list[models.QueryResponse]:
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Local mode performs exact")
                return list(
                    self.client.query_batch_points(
                        self.collection, requests=requests, consistency=self._read
                    )
                )
        except Exception as exc:
            if not self._scoped_idf:
                raise
            plain = [
                r.model_copy(update={"params": None}) if r.using == SPARSE else r for r in requests
            ]
            found = list(
                self.client.query_batch_points(
                    self.collection, requests=plain, consistency=self._read
                )
            )
            self._no_scoped_idf(exc)  # the same request without it answered: that was it
            return found

    def _no_scoped_idf(self, exc: Exception) -> None:
        """Older servers do not know namespace-scoped IDF: collection IDF from now on (BM25
        weighs a term by its rarity in the whole collection, every namespace), said once."""
        self._scoped_idf = False
        self._lacks(
            "no namespace-scoped BM25 IDF (" + _first_line(exc) + "): BM25 weighs terms by "
            "their rarity across every namespace of the collection"
        )

    def _query(self, **kwargs: Any) -> list[models.ScoredPoint]:
        try:
            with warnings.catch_warnings():
                # local mode: "exact search, search_params have no effect" is expected
                warnings.filterwarnings("ignore", message="Local mode performs exact")
                result = self.client.query_points(
                    self.collection,
                    with_payload=_RETURNED_FIELDS,
                    consistency=self._read,
                    **kwargs,
                )
        except Exception as exc:
            if not self._scoped_idf:
                raise
            kwargs = _without_idf(kwargs)
            result = self.client.query_points(
                self.collection, with_payload=_RETURNED_FIELDS, consistency=self._read, **kwargs
            )
            self._no_scoped_idf(exc)  # the same query without it answered: that was it
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
                query_filter=to_filter(flt),
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
                filter=to_filter(flt),
                params=models.SearchParams(hnsw_ef=hnsw_ef),
                with_payload=_RETURNED_FIELDS,
            )
            for dense, flt, limit in searches
        ]
        with warnings.catch_warnings():  # dense only: no IDF fallback to try (``_batch``)
            warnings.filterwarnings("ignore", message="Local mode performs exact")
            found = self.client.query_batch_points(
                self.collection, requests=requests, consistency=self._read
            )
        return [_hits(response.points) for response in found]

    def sparse_search(self, sparse: SparseVec, flt: IndexFilter, limit: int) -> list[IndexHit]:
        if not self._exists() or not sparse:
            return []
        return _hits(
            self._query(
                query=_sparse(sparse),
                using=SPARSE,
                query_filter=to_filter(flt),
                limit=limit,
                search_params=self._sparse_params(flt),
            )
        )

    def dense_similarities(
        self, others: Mapping[str, Sequence[str]], model: str
    ) -> dict[tuple[str, str], float]:
        # As on the embedded engine: the memories' own vectors (one retrieve), then one filtered
        # search per memory over its others (one batch): the server scores the others, whose
        # vectors never cross the network.
        wanted = {m: list(found) for m, found in others.items() if found}
        if not wanted or not self._exists():
            return {}
        owner = {point_id(m): m for m in wanted}
        records = self.client.retrieve(
            self.collection,
            list(owner),
            with_payload=["model"],
            with_vectors=[DENSE],
            consistency=self._read,
        )
        vectors: dict[str, list[float]] = {}
        for record in records:
            found = record.vector
            dense = found.get(DENSE) if isinstance(found, dict) else None
            if dense is not None and (record.payload or {}).get("model") == model:
                vectors[owner[str(record.id)]] = list(dense)  # type: ignore[arg-type]
        targets = [(m, {point_id(o): o for o in wanted[m]}) for m in wanted if m in vectors]
        if not targets:
            return {}
        requests = [
            models.QueryRequest(
                query=vectors[memory],
                using=DENSE,
                limit=len(points),
                filter=models.Filter(
                    must=[
                        models.HasIdCondition(has_id=list(points)),
                        models.FieldCondition(key="model", match=models.MatchValue(value=model)),
                    ]
                ),
                with_payload=False,
            )
            for memory, points in targets
        ]
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Local mode performs exact")
            batch = self.client.query_batch_points(
                self.collection, requests=requests, consistency=self._read
            )
        return {
            (memory, points[str(point.id)]): float(point.score)
            for (memory, points), response in zip(targets, batch, strict=True)
            for point in response.points
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
                self.collection,
                limit=1000,
                offset=offset,
                with_payload=list(fields),
                consistency=self._read,
            )
            for record in records:
                yield str(record.id), dict(record.payload or {})
            if offset is None or not records:
                return

    def stats(self) -> IndexStats:
        limitations = list(self.features.limitations) if self._features is not None else []
        if not self._exists():
            return IndexStats(
                mode=self.mode,
                points=0,
                details={"initialised": False, "limitations": limitations, **self.details},
                reason=self.reason,
            )
        count = self.client.count(self.collection, exact=True).count
        late = self.late_interaction
        details: dict[str, Any] = {
            "collection": self.collection,
            "late_interaction": late,
            "limitations": limitations,
            **self.details,
        }
        if late:
            details["tokens_datatype"] = TOKENS_DATATYPE.value
        return IndexStats(mode=self.mode, points=int(count), details=details, reason=self.reason)

    def reset(self, dimension: int, *, late_interaction: bool = False) -> None:
        with self._lock:
            if self._exists():
                self.client.delete_collection(self.collection)
            self._late = None
            self.ensure_collection(dimension, late_interaction=late_interaction)

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


def _vectors(point: IndexPoint, late: bool) -> dict[str, Any]:
    dense = vector_floats(point.dense)
    vectors: dict[str, Any] = {
        DENSE: dense,
        SPARSE: models.SparseVector(
            indices=list(point.sparse.indices), values=list(point.sparse.values)
        ),
    }
    if late:
        # Every point of a collection with the channel has token vectors: the dense vector
        # stands in where a text gives none (as on the embedded engine). Rounded through
        # float16, the server's datatype, so that local mode scores what a server stores.
        tokens = point.tokens if point.tokens is not None and len(point.tokens) else [dense]
        vectors[TOKENS] = np.asarray(tokens, dtype=np.float16).astype(np.float32).tolist()
    return vectors


def _first_line(exc: BaseException) -> str:
    return ((str(exc).strip().splitlines() or [type(exc).__name__])[0])[:160]


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
