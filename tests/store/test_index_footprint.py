"""The embedded index's files: small WAL segments and vector chunks, sparse, and the space checks
that keep the engine from touching a page the disk cannot hold (issue 38, parts 2 and 3).
Real engine (qdrant-edge) in ``tmp_path``; the full-disk behaviour through MCP and the CLI is
in test_disk_full.py and test_disk_restart.py."""

from __future__ import annotations

import errno
import json
import uuid
from pathlib import Path

import numpy as np
import pytest
import qdrant_edge as q

from ferrex.core.errors import StorageSpaceError, storage_full
from ferrex.core.ports import IndexFilter, IndexPoint, SparseVec
from ferrex.store import edge_disk
from ferrex.store.edge import EdgeIndex


def points(count: int, seed: int = 3) -> list[IndexPoint]:
    rng = np.random.default_rng(seed)
    out = []
    for n in range(count):
        dense = rng.random(384).astype(np.float32)
        tokens = rng.random((5, 384)).astype(np.float32)
        payload = {"memory_id": f"m{n}", "namespace": "default", "chunk": 0, "type": "semantic"}
        out.append(
            IndexPoint(str(uuid.uuid4()), dense, SparseVec((1, 2), (0.5, 0.5)), payload, tokens)
        )
    return out


@pytest.mark.parametrize("late", [False, True])
def test_a_new_index_has_small_wal_segments_and_chunks(tmp_path: Path, late: bool) -> None:
    path = tmp_path / "index"
    index = EdgeIndex(path)
    index.ensure_collection(384, late_interaction=late)
    fresh = edge_disk.apparent_bytes(path)
    assert fresh <= edge_disk.FRESH_SHARD_BYTES  # what creating one checks is free
    wal = [f.stat().st_size for f in (path / "wal").iterdir() if f.name.startswith("open")]
    assert wal and max(wal) == edge_disk.WAL_SEGMENT_BYTES
    index.upsert(points(10))
    index.flush()
    chunks = [f.stat().st_size for f in path.rglob("chunk_*.mmap")]
    assert len(chunks) == (3 if late else 1)
    assert max(chunks) <= edge_disk.CHUNK_BYTES
    grown = edge_disk.apparent_bytes(path) - fresh  # the chunks and a few small files
    assert grown <= len(chunks) * edge_disk.CHUNK_BYTES + 1024 * 1024
    index.close()
    reopened = EdgeIndex(path)
    assert reopened.stats().points == 10
    reopened.close()


def test_an_existing_index_keeps_its_vectors_and_gets_small_wal_segments(tmp_path: Path) -> None:
    """A shard made as ferrex made them before (the engine's defaults, sparse files)."""
    path = tmp_path / "index"
    config = q.EdgeConfig(
        vectors={"dense": q.EdgeVectorParams(size=384, distance=q.Distance.Cosine)},
        sparse_vectors={"bm25": q.EdgeSparseVectorParams(modifier=q.Modifier.Idf)},
    )
    shard = q.EdgeShard.create(str(path), config)
    old = points(3)
    shard.update(
        q.UpdateOperation.upsert_points(
            [
                q.Point(
                    p.point_id,
                    {"dense": p.dense.tolist(), "bm25": q.SparseVector([1, 2], [0.5, 0.5])},
                    p.payload,
                )
                for p in old
            ]
        )
    )
    shard.close()
    index = EdgeIndex(path)
    config_written = json.loads((path / "edge_config.json").read_text(encoding="utf-8"))
    assert config_written["wal_options"]["segment_capacity"] == edge_disk.WAL_SEGMENT_BYTES
    hits = index.dense_search(old[1].dense, IndexFilter(namespace="default"), 3, 64)
    assert hits[0].memory_id == "m1"
    index.close()


def test_the_space_checks_at_their_boundary(tmp_path: Path) -> None:
    free = edge_disk.free_bytes(tmp_path)
    assert free is not None and free > 0
    edge_disk.require_free(tmp_path, free // 2, "a write")  # room: nothing raised
    with pytest.raises(StorageSpaceError) as refused:
        edge_disk.require_free(tmp_path, free + 1024**4, "opening the memory store")
    assert refused.value.errno == errno.ENOSPC
    assert "opening the memory store needs" in str(refused.value)
    # Rounded up: a need of one byte is 1 MB, never 0.
    assert "needs 1 MB free (0 MB free now)" in StorageSpaceError(1, 0, "x").describe()
    assert "needs 2 MB free" in StorageSpaceError(1024 * 1024 + 1, 0, "x").describe()
    opening = storage_full(StorageSpaceError(5 * 1024 * 1024, 0, "opening the memory store"))
    writing = storage_full(StorageSpaceError(5 * 1024 * 1024, 0, "a write to the memory store"))
    assert opening.code == writing.code == "storage_full"
    assert "not opened" in opening.message and "nothing was stored" in writing.message
    assert str(tmp_path) not in opening.message + writing.message


def test_a_write_is_refused_unless_the_disk_can_hold_every_page_it_may_touch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "index"
    index = EdgeIndex(path)
    index.ensure_collection(384)
    index.upsert(points(2))
    holes = edge_disk.unbacked_bytes(path)  # the engine's files' pages not written yet
    room = {"free": holes + edge_disk.GROWTH_BYTES - 1}
    monkeypatch.setattr(edge_disk, "free_bytes", lambda _: room["free"])
    with pytest.raises(StorageSpaceError) as refused:
        index.upsert(points(1, seed=9))
    assert refused.value.needed == holes + edge_disk.GROWTH_BYTES
    assert edge_disk.unbacked_bytes(path) == holes and index.stats().points == 2  # untouched
    room["free"] = holes + 2 * edge_disk.WAL_SEGMENT_BYTES
    index.delete_memories(["m0"])  # a delete needs room for its log only
    room["free"] = 1024**4
    index.upsert(points(1, seed=9))
    assert index.stats().points == 2
    index.close()
