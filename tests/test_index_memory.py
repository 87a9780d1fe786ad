"""What opening the embedded index costs in memory: vectors are mapped, not loaded.

The engine pre-sizes each vector storage in 32 MB chunks; a collection whose vectors are
"Cached" reads every chunk into memory when the shard opens, whatever the store holds (three
chunks with the late-interaction channel: ~96 MB resident for a handful of memories). ferrex
creates its collections with the vectors mapped ("Cold"): resident is what searches touch.
Measured in a fresh process (the kernel's own count of the mapped pages it holds).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from ferrex.core.ids import point_id
from ferrex.core.ports import IndexFilter, IndexPoint, SparseVec
from ferrex.store.edge import EdgeIndex

OPEN_AND_MEASURE = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    def mapped_mb():
        status = open("/proc/self/status").read().splitlines()
        line = next(x for x in status if x.startswith("RssFile:"))
        return int(line.split()[1]) / 1024

    import qdrant_edge  # the engine's own library is mapped before the measure starts
    from ferrex.store.edge import EdgeIndex

    before = mapped_mb()
    index = EdgeIndex(Path(sys.argv[1]))
    assert index.late_interaction
    print(mapped_mb() - before)
    """
)


def test_opening_a_store_maps_its_vectors_instead_of_loading_every_storage_chunk(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(7)
    index = EdgeIndex(tmp_path / "index")
    index.ensure_collection(384, late_interaction=True)
    points = []
    for n in range(200):
        dense = rng.standard_normal(384).astype(np.float32)
        tokens = rng.standard_normal((18, 384)).astype(np.float32)
        points.append(
            IndexPoint(
                point_id=point_id(f"mem_{n}"),
                dense=dense / np.linalg.norm(dense),
                sparse=SparseVec((), ()),
                payload={"memory_id": f"mem_{n}", "namespace": "default", "chunk": 0},
                tokens=tokens / np.linalg.norm(tokens, axis=1, keepdims=True),
            )
        )
    index.upsert(points)
    index.flush()
    index.close()

    opened = subprocess.run(
        [sys.executable, "-c", OPEN_AND_MEASURE, str(tmp_path / "index")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    grown = float(opened.stdout.strip().splitlines()[-1])
    # Measured here: 159 MB with the chunks loaded (three times 32 MB for 200 memories, the
    # same up to ~20k), 63 MB mapped (what opening reads: the write-ahead log and the payload
    # indexes' pages).
    assert grown < 100, f"opening the index made {grown:.0f} MB resident"

    # Mapped vectors still answer: the nearest of the stored vectors is itself.
    reopened = EdgeIndex(tmp_path / "index")
    target = points[42]
    hits = reopened.dense_search(target.dense, IndexFilter(namespace="default"), 3, 64)
    assert hits[0].memory_id == "mem_42"
    reopened.close()
