"""EdgeIndex: the vector index on Qdrant Edge (``qdrant-edge-py``), in-process, in the data dir."""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import qdrant_edge as q
import structlog

from ferrex.core.ids import point_id
from ferrex.core.index.points import (
    DATETIME_FIELDS,
    INTEGER_FIELDS,
    KEYWORD_FIELDS,
    vector_floats,
)
from ferrex.core.ports import IndexFilter, IndexHit, IndexPoint, IndexStats, SparseVec, Vector
from ferrex.core.recall.formulas import hit_order
from ferrex.store import edge_disk
from ferrex.store.edge_build import (
    OPTIMIZE_MIN_UNINDEXED,
    BackgroundOptimizer,
    _old_path,
    _recover_swap,
)
from ferrex.store.edge_filter import index_filter, namespace_filter, sparse_vector

log = structlog.get_logger("ferrex.index")

DENSE = "dense"
SPARSE = "bm25"
TOKENS = "tokens"  # the late-interaction multivector (MaxSim), where the collection has it
_CONFIG = "edge_config.json"  # the engine's own: the collection's vectors
_RETURNED_FIELDS = ["memory_id", "chunk", "type"]
# The most points ``EdgeIndex._known`` holds (~300 bytes each); past it the older half goes.
_KNOWN_POINTS = 50_000
# The engine flushes only when asked; its log keeps every update until then (~32 KB a memory
# with token vectors: 2.2 GB over a 70k bulk import, replayed at the next open).
FLUSH_EVERY_POINTS = 2_000
# One string per memory type: what ``_known`` holds is not a copy per point.
_TYPES = {name: name for name in ("episodic", "semantic", "procedural")}
# A point id as the engine returns it (ferrex's are UUIDs).
_EngineId = uuid.UUID | int | str


class IndexLockedError(Exception):
    """Another process holds the index (one owner per data dir)."""


class EdgeIndex:
    """Qdrant Edge shard with the ferrex collection schema."""

    mode = "embedded"

    def __init__(
        self,
        path: Path,
        *,
        reason: str = "",
        optimize_min_unindexed: int = OPTIMIZE_MIN_UNINDEXED,
    ) -> None:
        self.path = path
        self.reason = reason
        self._shard: q.EdgeShard | None = None
        self._lock = threading.RLock()
        # Update operations applied while a background build works on a copy: replayed onto
        # the copy before it replaces the live shard (None: no build under way).
        self._pending: list[q.UpdateOperation] | None = None
        self.optimizer = BackgroundOptimizer(self, optimize_min_unindexed)
        self._late = False
        self._unflushed = 0  # points written since the last flush (FLUSH_EVERY_POINTS)
        # What the engine returned with points it found: (memory_id, chunk, type) by point id.
        # A point id derives from its memory id and chunk (core/ids.py) and a memory keeps its
        # type, so an entry is never wrong for a point that exists; writes drop theirs anyway.
        # A search over known point ids then asks for no payload, which costs the engine ~5 us
        # a point (a recall's evidence batch returns ~100 of them). Keyed by the id object the
        # engine returns (a ``uuid.UUID``), which hashes ~7x faster than it turns into the
        # string ``IndexHit`` carries (held in the entry).
        self._known: dict[_EngineId, tuple[str, str, int, str]] = {}
        _recover_swap(path)
        if (path / _CONFIG).exists() or _has_segments(path):
            self._shard = self._load(path)
            self._late = TOKENS in edge_disk.config_vectors(path)

    @property
    def late_interaction(self) -> bool:
        return self._late

    @staticmethod
    def _load(path: Path) -> q.EdgeShard:
        try:
            return edge_disk.load_checked(path)
        except Exception as exc:  # the engine raises a bare Exception
            if "WouldBlock" in str(exc):
                raise IndexLockedError("the vector index is open in another process") from exc
            raise

    # ------------------------------------------------------------------ schema

    def ensure_collection(self, dimension: int, *, late_interaction: bool = False) -> None:
        """Create the collection if there is none (an existing one keeps its channels: the
        late-interaction one comes with ``reset``, i.e. ``ferrex rebuild-index``)."""
        with self._lock:
            if self._shard is not None:
                return
            self.path.mkdir(parents=True, exist_ok=True)
            vectors = {DENSE: q.EdgeVectorParams(size=dimension, distance=q.Distance.Cosine)}
            if late_interaction:
                # Only rescored by filtered MaxSim queries over known candidates: no graph.
                vectors[TOKENS] = q.EdgeVectorParams(
                    size=dimension,
                    distance=q.Distance.Cosine,
                    multivector_config=q.MultiVectorConfig(q.MultiVectorComparator.MaxSim),
                    # 8-bit TurboQuant storage: ~400 bytes a 384-d vector; MaxSim within
                    # ~0.003 of float32 (docs/recall.md).
                    datatype=q.VectorStorageDatatype.Turbo8,
                    hnsw_config=q.HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=0),
                    memory=q.Memory.Cold,  # mapped, not read in (store/edge_disk.py)
                )
            config = q.EdgeConfig(
                vectors=vectors,
                sparse_vectors={SPARSE: q.EdgeSparseVectorParams(modifier=q.Modifier.Idf)},
            )
            edge_disk.require_free(
                self.path.parent, edge_disk.FRESH_SHARD_BYTES, "creating the memory store"
            )
            shard = edge_disk.create_shard(self.path, config)
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
            shard.flush()
            edge_disk.check_created(self.path, shard)
            self._shard = shard
            self._late = late_interaction

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
        edge_points = [q.Point(p.point_id, self._vectors(p), p.payload) for p in points]
        self._forget_known([p.point_id for p in points])
        self._apply(q.UpdateOperation.upsert_points(edge_points), points=len(edge_points))

    def _vectors(self, point: IndexPoint) -> dict[str, Any]:
        vectors: dict[str, Any] = {
            DENSE: vector_floats(point.dense),
            SPARSE: q.SparseVector(list(point.sparse.indices), list(point.sparse.values)),
        }
        if self._late:
            # Every point of a collection with the channel has token vectors (the count of
            # unindexed vectors relies on it): the dense vector stands in where a text gives
            # none.
            tokens = point.tokens if point.tokens is not None and len(point.tokens) else None
            vectors[TOKENS] = (
                np.asarray(tokens, dtype=np.float32).tolist()
                if tokens is not None
                else [vectors[DENSE]]
            )
        return vectors

    def delete_memories(self, memory_ids: Sequence[str]) -> None:
        if not memory_ids or self._shard is None:
            return
        flt = q.Filter(must=[q.FieldCondition("memory_id", match=q.MatchAny(list(memory_ids)))])
        gone = set(memory_ids)
        with self._lock:
            self._forget_known([known[0] for known in self._known.values() if known[1] in gone])
        self._apply(q.UpdateOperation.delete_points_by_filter(flt), grows=False)

    def delete_points(self, point_ids: Sequence[str]) -> None:
        if not point_ids or self._shard is None:
            return
        self._forget_known(point_ids)
        self._apply(q.UpdateOperation.delete_points(list(point_ids)), grows=False)

    def _forget_known(self, point_ids: Sequence[str]) -> None:
        with self._lock:
            for pid in point_ids:
                self._known.pop(_engine_id(pid), None)

    def _hits(self, points: Sequence[q.ScoredPoint]) -> list[IndexHit]:
        """Hits of engine points found without their payload: what each point is comes from
        ``_known``, or from one retrieve of the points it does not hold yet. (Under the lock
        since the query: a point found exists when retrieved.) Each point's ``id`` is read
        once: the engine builds a new ``uuid.UUID`` at every read (0.65 us)."""
        known = self._known
        found = [(point.id, point.score) for point in points]
        unknown = [engine_id for engine_id, _ in found if engine_id not in known]
        fetched: dict[_EngineId, tuple[str, str, int, str]] = {}
        if unknown:
            for record in self.shard.retrieve(
                unknown, with_payload=_RETURNED_FIELDS, with_vector=False
            ):
                payload = record.payload or {}
                fetched[record.id] = (
                    str(record.id),
                    str(payload.get("memory_id", "")),
                    int(payload.get("chunk", 0) or 0),
                    _TYPES.get(str(payload.get("type", "")), ""),
                )
        hits = []
        for engine_id, score in found:
            entry = known.get(engine_id) or fetched.get(engine_id)
            if entry is None:  # gone between the query and the retrieve (never under the lock)
                hits.append(IndexHit(str(engine_id), "", float(score)))
                continue
            pid, memory_id, chunk, memory_type = entry
            hits.append(IndexHit(pid, memory_id, float(score), chunk, memory_type))
        if fetched:
            if len(known) + len(fetched) > _KNOWN_POINTS:
                for key in list(islice(known, len(known) // 2 + 1)):
                    del known[key]  # the older half
            known.update(fetched)
        hits.sort(key=hit_order)
        return hits

    def set_payload(self, memory_id: str, payload: dict[str, Any]) -> None:
        flt = q.Filter(must=[q.FieldCondition("memory_id", match=q.MatchValue(memory_id))])
        self._apply(q.UpdateOperation.set_payload_by_filter(flt, payload))

    def _apply(self, operation: q.UpdateOperation, *, grows: bool = True, points: int = 1) -> None:
        """One engine update, refused (``StorageSpaceError``) unless the disk has room for the
        pages the engine may touch in it: its files' holes and what it may add (store/
        edge_disk.py; a delete adds its log only). The check walks the shard's files: ~3 ms
        for a 10k store's 150."""
        extra = edge_disk.GROWTH_BYTES if grows else 2 * edge_disk.WAL_SEGMENT_BYTES
        edge_disk.require_backing(self.path, "a write to the memory store", extra)
        with self._lock:
            self.shard.update(operation)
            if self._pending is not None:
                self._pending.append(operation)
            self._unflushed += points
            if self._unflushed >= FLUSH_EVERY_POINTS:
                self._unflushed = 0
                self.flush_quietly()  # the update is in the log already

    # ------------------------------------------------------------------ reads

    def search_batch(
        self,
        dense: Vector,
        sparse: SparseVec,
        searches: Sequence[tuple[str, IndexFilter, int]],
        hnsw_ef: int,
        tokens: np.ndarray | None = None,
    ) -> list[list[IndexHit]]:
        """Several searches of one query, ("dense" | "sparse" | "tokens", filter, limit) each,
        in ONE engine call; one list of hits per search, in order ("tokens" finds nothing
        without the channel or query tokens)."""
        if self._shard is None or not searches:
            return [[] for _ in searches]
        vector = vector_floats(dense) if any(c == "dense" for c, _, _ in searches) else []
        late = self._late and tokens is not None and len(tokens) > 0
        with self._lock:  # what _known holds when the requests are made, until they return
            return self._search_batch(vector, sparse, searches, hnsw_ef, tokens, late)

    def _search_batch(
        self,
        vector: list[float],
        sparse: SparseVec,
        searches: Sequence[tuple[str, IndexFilter, int]],
        hnsw_ef: int,
        tokens: np.ndarray | None,
        late: bool,
    ) -> list[list[IndexHit]]:
        requests = []
        for channel, flt, limit in searches:
            if channel == "tokens":
                if not late:
                    continue
                assert tokens is not None
                requests.append(
                    q.QueryRequest(
                        limit=limit,
                        query=q.Query.Nearest(tokens.astype(np.float32).tolist(), using=TOKENS),
                        filter=index_filter(flt),
                        with_payload=False,
                    )
                )
            elif channel == "dense":
                requests.append(
                    q.QueryRequest(
                        limit=limit,
                        query=q.Query.Nearest(vector, using=DENSE),
                        filter=index_filter(flt),
                        params=q.SearchParams(hnsw_ef=hnsw_ef),
                        with_payload=False,
                    )
                )
            else:
                requests.append(
                    q.QueryRequest(
                        limit=limit,
                        query=q.Query.Nearest(sparse_vector(sparse), using=SPARSE),
                        filter=index_filter(flt),
                        params=q.SearchParams(idf=q.IdfParams(corpus=namespace_filter(flt))),
                        with_payload=False,
                    )
                )
        batch = self.shard.query_batch(q.QueryBatchRequest(requests)) if requests else []
        found = iter([self._hits(points) for points in batch])
        return [next(found) if channel != "tokens" or late else [] for channel, _, _ in searches]

    def dense_search(
        self, dense: Vector, flt: IndexFilter, limit: int, hnsw_ef: int
    ) -> list[IndexHit]:
        if self._shard is None:
            return []
        request = q.QueryRequest(
            limit=limit,
            query=q.Query.Nearest(vector_floats(dense), using=DENSE),
            filter=index_filter(flt),
            params=q.SearchParams(hnsw_ef=hnsw_ef),
            with_payload=False,
        )
        with self._lock:
            return self._hits(self.shard.query(request))

    def dense_search_many(
        self, searches: Sequence[tuple[Vector, IndexFilter, int]], hnsw_ef: int
    ) -> list[list[IndexHit]]:
        if self._shard is None or not searches:
            return [[] for _ in searches]
        requests = [
            q.QueryRequest(
                limit=limit,
                query=q.Query.Nearest(vector_floats(dense), using=DENSE),
                filter=index_filter(flt),
                params=q.SearchParams(hnsw_ef=hnsw_ef),
                with_payload=False,
            )
            for dense, flt, limit in searches
        ]
        with self._lock:
            batch = self.shard.query_batch(q.QueryBatchRequest(requests))
            return [self._hits(points) for points in batch]

    def sparse_search(self, sparse: SparseVec, flt: IndexFilter, limit: int) -> list[IndexHit]:
        if self._shard is None or not sparse:
            return []
        request = q.QueryRequest(
            limit=limit,
            query=q.Query.Nearest(sparse_vector(sparse), using=SPARSE),
            filter=index_filter(flt),
            params=q.SearchParams(idf=q.IdfParams(corpus=namespace_filter(flt))),
            with_payload=False,
        )
        with self._lock:
            return self._hits(self.shard.query(request))

    def dense_similarities(
        self, others: Mapping[str, Sequence[str]], model: str
    ) -> dict[tuple[str, str], float]:
        # The memories' own vectors (one retrieve), then one filtered search per memory over
        # its others (one batch): the engine scores the others; their vectors never leave it.
        wanted = {m: list(found) for m, found in others.items() if found}
        if self._shard is None or not wanted:
            return {}
        owner = {point_id(m): m for m in wanted}
        with self._lock:
            records = self.shard.retrieve(list(owner), with_payload=["model"], with_vector=[DENSE])
        vectors: dict[str, Any] = {}
        for record in records:
            found = record.vector
            dense = found.get(DENSE) if isinstance(found, dict) else None
            if dense is not None and (record.payload or {}).get("model") == model:
                vectors[owner[str(record.id)]] = dense
        memories = [m for m in wanted if m in vectors]
        if not memories:
            return {}
        requests, targets = [], []
        for memory in memories:
            points = {point_id(other): other for other in wanted[memory]}
            targets.append((memory, points))
            requests.append(
                q.QueryRequest(
                    limit=len(points),
                    query=q.Query.Nearest(vectors[memory], using=DENSE),
                    filter=q.Filter(
                        must=[
                            q.HasIdCondition(set(points)),
                            q.FieldCondition("model", match=q.MatchValue(model)),
                        ]
                    ),
                )
            )
        with self._lock:
            batch = self.shard.query_batch(q.QueryBatchRequest(requests))
        out: dict[tuple[str, str], float] = {}
        for (memory, points), scored in zip(targets, batch, strict=True):
            for point in scored:
                out[(memory, points[str(point.id)])] = float(point.score)
        return out

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
            with self._lock:
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
        with self._lock:
            info = self.shard.info()
        return IndexStats(
            mode=self.mode,
            points=int(info.points_count),
            details={
                "segments": int(info.segments_count),
                "indexed_vectors": int(info.indexed_vectors_count),
                "payload_indexes": sorted(info.payload_schema.keys()),
                "late_interaction": self._late,
                "background_index": self.optimizer.status(),
            },
            reason=self.reason,
        )

    def reset(self, dimension: int, *, late_interaction: bool = False) -> None:
        self.optimizer.cancel()
        with self._lock:
            if self._shard is not None:
                self._shard.close()
                self._shard = None
            if self.path.exists():
                shutil.rmtree(self.path)
            self._late = False
            self._known.clear()
            self.ensure_collection(dimension, late_interaction=late_interaction)

    def start_background_work(self) -> None:
        """Build the dense HNSW index in a child process whenever enough vectors lack it."""
        self.optimizer.start()

    def optimize(self) -> bool:
        if self._shard is None:
            return False
        with self._lock:
            return bool(self.shard.optimize())

    def size_bytes(self) -> int:
        """Disk used (the engine's files are pre-sized and sparse: their holes take none)."""
        return edge_disk.written_bytes(self.path)

    def flush(self) -> None:
        if self._shard is not None:
            with self._lock:
                self._shard.flush()
                self._unflushed = 0

    def flush_quietly(self) -> None:
        """Flush, logging a failure (e.g. a full disk): the engine's log replays what it holds."""
        try:
            self.shard.flush()
        except Exception as exc:  # the engine raises a bare Exception
            log.error("flushing the vector index failed", error=str(exc)[:300])

    def close(self) -> None:
        self.optimizer.cancel()
        with self._lock:
            if self._shard is not None:
                try:
                    self.flush_quietly()
                finally:
                    self._shard.close()
                    self._shard = None

    # ------------------------------------------------------------------ background index

    def unindexed_vectors(self) -> int:
        """Dense vectors not in an HNSW graph yet (searched by brute force). The engine counts
        every point's sparse vector as indexed, a dense one once its graph exists, and (with
        the late-interaction channel) a point's token vectors once its segment is optimized,
        like its dense one (every point has them: ``_vectors``): indexed = P + 2 x (dense in
        a graph)."""
        if self._shard is None:
            return 0
        with self._lock:
            info = self.shard.info()
        points, indexed = int(info.points_count), int(info.indexed_vectors_count)
        if self._late:
            return max(0, (3 * points - indexed) // 2)
        return max(0, 2 * points - indexed)

    def snapshot_for_build(self, target: Path) -> None:
        """Copy the shard's files to ``target`` and start recording updates for the swap."""
        with self._lock:
            self.shard.flush()
            shutil.copytree(self.path, target)
            self._pending = []

    def swap_in(self, built: Path) -> int:
        """Replace the live shard with the optimized copy at ``built``, after replaying onto it
        every update applied since the copy was taken. Returns the updates replayed."""
        edge_disk.require_backing(built, "the background index build")  # before it goes live
        staged = q.EdgeShard.load(str(built))
        replayed = 0
        try:
            while True:  # replay what is there without the lock; the tail under it
                with self._lock:
                    assert self._pending is not None
                    batch = self._pending[replayed:]
                    if len(batch) <= 64:
                        for operation in batch:
                            staged.update(operation)
                        replayed += len(batch)
                        staged.flush()
                        staged.close()
                        self._replace_live(built)
                        return replayed
                for operation in batch:
                    staged.update(operation)
                replayed += len(batch)
        except BaseException:
            with self._lock:
                self._pending = None
            raise

    def _replace_live(self, built: Path) -> None:
        """Under the lock: close the live shard, move the built copy in its place, load it."""
        old = _old_path(self.path)
        if self._shard is not None:
            self._shard.flush()
            self._shard.close()
            self._shard = None
        self._pending = None
        try:
            os.rename(self.path, old)
            os.rename(built, self.path)
        finally:
            _recover_swap(self.path)
            self._shard = self._load(self.path)
        shutil.rmtree(old, ignore_errors=True)

    def abandon_build(self) -> None:
        with self._lock:
            self._pending = None


def _has_segments(path: Path) -> bool:
    return path.exists() and any(path.iterdir())


def _engine_id(point_id: str) -> _EngineId:
    """A point id as the engine returns it in results (``_known``'s key)."""
    try:
        return uuid.UUID(point_id)
    except ValueError:
        return point_id
