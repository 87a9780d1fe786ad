"""The embedded index's memory does not grow with the store (issue 39 part 3): token vectors are
mapped from disk, not read in, from the start; dense ones once the store has its HNSW graph;
an existing index gets both at its next open, answering as before; the engine's write-ahead log
stays bounded through a long write. Real engine (qdrant-edge) in ``tmp_path``; what it saves in
RSS is measured in bench/ (RESULTS.md), not here."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import qdrant_edge as q

from ferrex.core.ports import IndexFilter, IndexPoint, SparseVec
from ferrex.store import edge_disk
from ferrex.store.edge import FLUSH_EVERY_POINTS, EdgeIndex

EVERYWHERE = IndexFilter(namespace="default")


def points(count: int, seed: int = 5, tokens: int = 4) -> list[IndexPoint]:
    rng = np.random.default_rng(seed)
    out = []
    for n in range(count):
        dense = rng.standard_normal(384).astype(np.float32)
        dense /= np.linalg.norm(dense)
        multi = rng.standard_normal((tokens, 384)).astype(np.float32)
        multi /= np.linalg.norm(multi, axis=1, keepdims=True)
        payload = {"memory_id": f"m{n}", "namespace": "default", "chunk": 0, "type": "semantic"}
        out.append(
            IndexPoint(str(uuid.uuid4()), dense, SparseVec((1, 2), (0.5, 0.5)), payload, multi)
        )
    return out


def storage_types(path: Path) -> dict[str, set[str]]:
    """Every segment's vector storage type, by vector name."""
    out: dict[str, set[str]] = {}
    for segment in (path / "segments").glob("*/segment.json"):
        data = json.loads(segment.read_text(encoding="utf-8"))
        for name, params in data["config"]["vector_data"].items():
            out.setdefault(name, set()).add(params["storage_type"])
    return out


def answers(index: EdgeIndex, asked: list[IndexPoint]) -> list[tuple[list[str], list[str]]]:
    """Each question's dense and MaxSim hits (memory ids, in order)."""
    out = []
    for point in asked:
        dense, tokens = index.search_batch(
            point.dense,
            point.sparse,
            [("dense", EVERYWHERE, 10), ("tokens", EVERYWHERE, 10)],
            64,
            tokens=point.tokens,
        )
        out.append(([h.memory_id for h in dense], [h.memory_id for h in tokens]))
    return out


def test_a_new_index_maps_its_token_vectors_and_reads_in_its_dense_ones(tmp_path: Path) -> None:
    path = tmp_path / "index"
    index = EdgeIndex(path)
    index.ensure_collection(384, late_interaction=True)
    written = points(30)
    index.upsert(written)
    index.flush()
    assert storage_types(path) == {"dense": {"InRamChunkedMmap"}, "tokens": {"ChunkedMmap"}}
    assert edge_disk.mapped_vectors(path) == {"tokens"}
    found = answers(index, written[:5])
    assert [tokens[0] for _, tokens in found] == [f"m{n}" for n in range(5)]
    index.close()


def as_before(path: Path) -> None:
    """The shard as ferrex made them before: every vector storage read in at open."""
    config_path = path / "edge_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    for params in config["vectors"].values():
        params.pop("memory", None)
    config_path.write_text(json.dumps(config), encoding="utf-8")
    for segment in (path / "segments").glob("*/segment.json"):
        text = segment.read_text(encoding="utf-8")
        segment.write_text(text.replace('"ChunkedMmap"', '"InRamChunkedMmap"'), encoding="utf-8")


def test_an_existing_index_maps_its_token_vectors_at_open_and_answers_the_same(
    tmp_path: Path,
) -> None:
    path = tmp_path / "index"
    index = EdgeIndex(path)
    index.ensure_collection(384, late_interaction=True)
    written = points(40)
    index.upsert(written)
    index.close()
    as_before(path)
    raw = q.EdgeShard.load(str(path))  # the engine opens it as it is: read in
    raw.close()
    assert storage_types(path)["tokens"] == {"InRamChunkedMmap"}
    index = EdgeIndex(path)
    assert storage_types(path) == {"dense": {"InRamChunkedMmap"}, "tokens": {"ChunkedMmap"}}
    assert edge_disk.mapped_vectors(path) == {"tokens"}
    assert index.stats().points == 40
    found = answers(index, written[:8])
    assert [tokens[0] for _, tokens in found] == [f"m{n}" for n in range(8)]
    assert [dense[0] for dense, _ in found] == [f"m{n}" for n in range(8)]
    index.close()


def test_the_hnsw_build_maps_the_dense_vectors_and_recall_answers_the_same(
    tmp_path: Path,
) -> None:
    path = tmp_path / "index"
    index = EdgeIndex(path, optimize_min_unindexed=1)
    index.ensure_collection(384, late_interaction=True)
    written = points(300)
    index.upsert(written)
    before = answers(index, written[:10])
    assert index.optimizer.build()
    # The engine builds a graph past its own size threshold (~6,700 dense vectors; 8,000 here
    # took 85 s on a loaded 2-core machine, its new segment "Mmap"): a test-sized build swaps
    # in the copy with every storage mapped all the same.
    assert edge_disk.mapped_vectors(path) == {"dense", "tokens"}
    kinds = storage_types(path)
    assert kinds["dense"] <= {"Mmap", "ChunkedMmap"} and kinds["tokens"] <= {"Mmap", "ChunkedMmap"}
    after = answers(index, written[:10])
    assert [d[:3] for d, _ in after] == [d[:3] for d, _ in before]
    assert [t[:3] for _, t in after] == [t[:3] for _, t in before]
    more = points(20, seed=9)
    index.upsert(more)  # a write after the build: into a mapped appendable segment
    assert answers(index, more[:1])[0][0][0] == "m0"
    index.close()
    reopened = EdgeIndex(path)
    assert reopened.stats().points == 320
    assert storage_types(path)["dense"] <= {"Mmap", "ChunkedMmap"}
    reopened.close()


def test_the_write_ahead_log_stays_bounded_through_a_long_write(tmp_path: Path) -> None:
    path = tmp_path / "index"
    index = EdgeIndex(path)
    index.ensure_collection(384, late_interaction=True)
    batches = 3 * FLUSH_EVERY_POINTS // 500
    for n in range(batches):
        index.upsert(points(500, seed=n, tokens=16))
    wal = sum(f.stat().st_size for f in (path / "wal").iterdir())
    # ~32 KB a point in the log: unflushed, 3 x FLUSH_EVERY_POINTS points would be ~190 MB.
    assert wal <= (FLUSH_EVERY_POINTS + 500) * 40_000
    assert index.stats().points == batches * 500
    index.close()
