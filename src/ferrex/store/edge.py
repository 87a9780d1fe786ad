"""EdgeIndex: the vector index on Qdrant Edge (``qdrant-edge-py``), in-process, in the data dir."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import qdrant_edge as q

from ferrex.core.clock import to_iso
from ferrex.core.indexing import DATETIME_FIELDS, INTEGER_FIELDS, KEYWORD_FIELDS
from ferrex.core.ports import IndexFilter, IndexHit, IndexPoint, IndexStats, SparseVec, Vector
from ferrex.core.retrieval import hit_order

DENSE = "dense"
SPARSE = "bm25"
_RETURNED_FIELDS = ["memory_id", "chunk"]


class IndexLockedError(Exception):
    """Another process holds the index (one owner per data dir)."""


class EdgeIndex:
    """Qdrant Edge shard with the ferrex collection schema."""

    mode = "embedded"

    def __init__(self, path: Path, *, reason: str = "") -> None:
        self.path = path
        self.reason = reason
        self._shard: q.EdgeShard | None = None
        self._lock = threading.RLock()
        if (path / "edge_config.json").exists() or _has_segments(path):
            self._shard = self._load(path)

    @staticmethod
    def _load(path: Path) -> q.EdgeShard:
        try:
            return q.EdgeShard.load(str(path))
        except Exception as exc:  # the engine raises a bare Exception
            if "WouldBlock" in str(exc):
                raise IndexLockedError("the vector index is open in another process") from exc
            raise

    # ------------------------------------------------------------------ schema

    def ensure_collection(self, dimension: int) -> None:
        with self._lock:
            if self._shard is not None:
                return
            self.path.mkdir(parents=True, exist_ok=True)
            config = q.EdgeConfig(
                vectors={DENSE: q.EdgeVectorParams(size=dimension, distance=q.Distance.Cosine)},
                sparse_vectors={SPARSE: q.EdgeSparseVectorParams(modifier=q.Modifier.Idf)},
            )
            shard = q.EdgeShard.create(str(self.path), config)
            for name in KEYWORD_FIELDS:
                shard.update(
                    q.UpdateOperation.create_field_index(name, q.PayloadSchemaType.Keyword)
                )
            for name in DATETIME_FIELDS:
                shard.update(
                    q.UpdateOperation.create_field_index(name, q.PayloadSchemaType.Datetime)
                )
            for name in INTEGER_FIELDS:
                shard.update(
                    q.UpdateOperation.create_field_index(name, q.PayloadSchemaType.Integer)
                )
            (self.path / "edge_config.json").write_text(
                f'{{"dense_dimension": {dimension}}}\n', encoding="utf-8"
            )
            self._shard = shard

    @property
    def shard(self) -> q.EdgeShard:
        if self._shard is None:
            raise RuntimeError("vector index not initialised")
        return self._shard

    def payload_schema(self) -> dict[str, str]:
        return {
            name: str(info.data_type) for name, info in self.shard.info().payload_schema.items()
        }

    # ------------------------------------------------------------------ writes

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        if not points:
            return
        edge_points = [
            q.Point(
                p.point_id,
                {
                    DENSE: [float(x) for x in p.dense],
                    SPARSE: q.SparseVector(list(p.sparse.indices), list(p.sparse.values)),
                },
                p.payload,
            )
            for p in points
        ]
        with self._lock:
            self.shard.update(q.UpdateOperation.upsert_points(edge_points))

    def delete_memories(self, memory_ids: Sequence[str]) -> None:
        if not memory_ids or self._shard is None:
            return
        flt = q.Filter(must=[q.FieldCondition("memory_id", match=q.MatchAny(list(memory_ids)))])
        with self._lock:
            self.shard.update(q.UpdateOperation.delete_points_by_filter(flt))

    def delete_points(self, point_ids: Sequence[str]) -> None:
        if not point_ids or self._shard is None:
            return
        with self._lock:
            self.shard.update(q.UpdateOperation.delete_points(list(point_ids)))

    def set_payload(self, memory_id: str, payload: dict[str, Any]) -> None:
        flt = q.Filter(must=[q.FieldCondition("memory_id", match=q.MatchValue(memory_id))])
        with self._lock:
            self.shard.update(q.UpdateOperation.set_payload_by_filter(flt, payload))

    # ------------------------------------------------------------------ reads

    def channels(
        self,
        dense: Vector,
        sparse: SparseVec,
        flt: IndexFilter,
        prefetch: int,
        hnsw_ef: int,
    ) -> tuple[list[IndexHit], list[IndexHit]]:
        """Dense and BM25 candidates in ONE engine call (a query batch); core fuses them."""
        if self._shard is None:
            return [], []
        edge_filter = _filter(flt)
        requests = [
            q.QueryRequest(
                limit=prefetch,
                query=q.Query.Nearest([float(x) for x in dense], using=DENSE),
                filter=edge_filter,
                params=q.SearchParams(hnsw_ef=hnsw_ef),
                with_payload=_RETURNED_FIELDS,
            )
        ]
        if sparse:
            requests.append(
                q.QueryRequest(
                    limit=prefetch,
                    query=q.Query.Nearest(_sparse(sparse), using=SPARSE),
                    filter=edge_filter,
                    params=q.SearchParams(idf=q.IdfParams(corpus=_namespace_filter(flt))),
                    with_payload=_RETURNED_FIELDS,
                )
            )
        results = [
            _hits(points) for points in self.shard.query_batch(q.QueryBatchRequest(requests))
        ]
        return results[0], results[1] if len(results) > 1 else []

    def dense_search(
        self, dense: Vector, flt: IndexFilter, limit: int, hnsw_ef: int
    ) -> list[IndexHit]:
        if self._shard is None:
            return []
        request = q.QueryRequest(
            limit=limit,
            query=q.Query.Nearest([float(x) for x in dense], using=DENSE),
            filter=_filter(flt),
            params=q.SearchParams(hnsw_ef=hnsw_ef),
            with_payload=_RETURNED_FIELDS,
        )
        return _hits(self.shard.query(request))

    def sparse_search(self, sparse: SparseVec, flt: IndexFilter, limit: int) -> list[IndexHit]:
        if self._shard is None or not sparse:
            return []
        request = q.QueryRequest(
            limit=limit,
            query=q.Query.Nearest(_sparse(sparse), using=SPARSE),
            filter=_filter(flt),
            params=q.SearchParams(idf=q.IdfParams(corpus=_namespace_filter(flt))),
            with_payload=_RETURNED_FIELDS,
        )
        return _hits(self.shard.query(request))

    def points_by_memory(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for pid, payload in self.point_payloads(["memory_id"]):
            out.setdefault(str(payload.get("memory_id", "")), []).append(pid)
        return out

    def point_payloads(self, fields: Sequence[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        if self._shard is None:
            return
        offset: Any = None
        while True:
            records, offset = self.shard.scroll(
                q.ScrollRequest(offset=offset, limit=1000, with_payload=list(fields))
            )
            for record in records:
                yield str(record.id), dict(record.payload or {})
            if offset is None or not records:
                return

    def stats(self) -> IndexStats:
        if self._shard is None:
            return IndexStats(
                mode=self.mode, points=0, details={"initialised": False}, reason=self.reason
            )
        info = self.shard.info()
        return IndexStats(
            mode=self.mode,
            points=int(info.points_count),
            details={
                "segments": int(info.segments_count),
                "indexed_vectors": int(info.indexed_vectors_count),
                "payload_indexes": sorted(info.payload_schema.keys()),
            },
            reason=self.reason,
        )

    def reset(self, dimension: int) -> None:
        with self._lock:
            if self._shard is not None:
                self._shard.close()
                self._shard = None
            if self.path.exists():
                shutil.rmtree(self.path)
            self.ensure_collection(dimension)

    def optimize(self) -> bool:
        if self._shard is None:
            return False
        with self._lock:
            return bool(self.shard.optimize())

    def size_bytes(self) -> int:
        if not self.path.exists():
            return 0
        # Disk actually used: the engine preallocates sparse files (32 MiB pages, WAL).
        return sum(f.stat().st_blocks * 512 for f in self.path.rglob("*") if f.is_file())

    def flush(self) -> None:
        if self._shard is not None:
            with self._lock:
                self._shard.flush()

    def close(self) -> None:
        with self._lock:
            if self._shard is not None:
                try:
                    self._shard.flush()
                finally:
                    self._shard.close()
                    self._shard = None


def _has_segments(path: Path) -> bool:
    return path.exists() and any(path.iterdir())


def _sparse(vec: SparseVec) -> q.SparseVector:
    return q.SparseVector(list(vec.indices), list(vec.values))


def _hits(points: Sequence[q.ScoredPoint]) -> list[IndexHit]:
    hits = []
    for point in points:
        payload = point.payload or {}
        hits.append(
            IndexHit(
                point_id=str(point.id),
                memory_id=str(payload.get("memory_id", "")),
                score=float(point.score),
                chunk=int(payload.get("chunk", 0) or 0),
            )
        )
    return sorted(hits, key=hit_order)


def _namespace_filter(flt: IndexFilter) -> q.Filter:
    return q.Filter(must=[q.FieldCondition("namespace", match=q.MatchValue(flt.namespace))])


def _filter(flt: IndexFilter) -> q.Filter:
    must: list[Any] = [q.FieldCondition("namespace", match=q.MatchValue(flt.namespace))]
    if flt.model is not None:
        must.append(q.FieldCondition("model", match=q.MatchValue(flt.model)))
    if flt.types:
        must.append(q.FieldCondition("type", match=q.MatchAny(list(flt.types))))
    if flt.entity_ids is not None:
        values = [str(e) for e in flt.entity_ids] or ["__none__"]
        must.append(q.FieldCondition("entities", match=q.MatchAny(values)))
    current = q.IsEmptyCondition("t_invalid")  # "empty" = null or absent
    ranged = flt.time_after is not None or flt.time_before is not None
    if ranged:
        after = to_iso(flt.time_after) if flt.time_after else None
        before = to_iso(flt.time_before) if flt.time_before else None
        semantic = q.FieldCondition("type", match=q.MatchValue("semantic"))
        # Events and procedures: their time inside the range (and current, unless asked).
        others: list[Any] = [q.FieldCondition("time", range=q.RangeDateTime(gte=after, lte=before))]
        if flt.as_of is None and flt.validity == "current":
            others.append(current)
        # Facts: valid at some moment of the range, superseded since or not (spec: historical
        # queries "specify a time range to include invalidated facts").
        facts: list[Any] = [semantic]
        if before is not None:
            facts.append(q.FieldCondition("t_valid", range=q.RangeDateTime(lte=before)))
        if after is not None:
            facts.append(
                q.Filter(
                    should=[
                        current,
                        q.FieldCondition("t_invalid", range=q.RangeDateTime(gt=after)),
                    ]
                )
            )
        must.append(
            q.Filter(should=[q.Filter(must=others, must_not=[semantic]), q.Filter(must=facts)])
        )
    if flt.as_of is not None:
        moment = to_iso(flt.as_of)
        must.append(q.FieldCondition("t_valid", range=q.RangeDateTime(lte=moment)))
        must.append(
            q.Filter(
                should=[
                    q.IsEmptyCondition("t_invalid"),
                    q.FieldCondition("t_invalid", range=q.RangeDateTime(gt=moment)),
                ]
            )
        )
    elif flt.validity == "current" and not ranged:
        # "Empty" = null or absent: a payload refresh with t_invalid=None drops the key.
        must.append(current)
    return q.Filter(must=must)
