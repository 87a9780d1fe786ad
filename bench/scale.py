"""A large composed store, measured: its HNSW graph built once (cached with it), then served
over MCP stdio: recall p50 / p95, ``stats`` time, the server's memory (RSS, RssAnon, RssFile,
PSS) and the store's disk (apparent and written).

    python bench/stores.py 10000 --composed 1000000 --sentences 2500 --checkpoints 300000
    python bench/scale.py ~/.cache/ferrex-bench/store-300000-...-composed-late-p2500

The store is built by ``bench/stores.py`` (composed vectors, the real write path; see
``composed_store``), outside CI. Its graph is built here in a child process as the server's
background build does (``store/edge_build.py``: the dense vectors mapped), once: ``build.json``
records the seconds. The server then runs on the cached store itself (no copy: a million
memories is ~11 GB), asked only recalls and ``stats``; a recall's access bookkeeping is its
only write. Every question is asked once (none is answered from a warm cache of the one before).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "src"))
sys.path.insert(0, str(BENCH))

from mcp import Client  # noqa: E402

from corpus import queries  # noqa: E402
from latency import children_of, ferrex_params, memory_mb, summary  # noqa: E402
from stores import build_info  # noqa: E402

MIB = 1024 * 1024


def disk(data: Path) -> dict[str, float]:
    """Apparent and written MB of the index and of SQLite's files."""
    out: dict[str, float] = {}
    for name, paths in (("index", [data / "index"]), ("sqlite", sorted(data.glob("ferrex.db*")))):
        apparent = written = 0
        for path in paths:
            files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
            for file in files:
                info = file.lstat()
                apparent += info.st_size
                written += info.st_blocks * 512
        out[f"{name}_apparent_mb"] = round(apparent / MIB, 1)
        out[f"{name}_written_mb"] = round(written / MIB, 1)
    return out


def build_graph(store: Path) -> dict[str, Any]:
    """The dense HNSW graph, built once (cached with the store) by the engine's optimize() in a
    child process, as the server's background build does, with the dense vectors mapped
    (``store/edge_build.py``) — but in place: the server's build works on a copy, which at a
    million memories would need another ~11 GB."""
    info = build_info(store)
    if "hnsw_seconds" in info:
        return info
    from ferrex.store import edge_disk

    path = store / "data" / "index"
    edge_disk.vectors_mapped(path, ("dense", edge_disk.MAPPED_ALWAYS))
    code = (
        "import json, sys, qdrant_edge as q; s = q.EdgeShard.load(sys.argv[1]); "
        "before = s.info().indexed_vectors_count; s.optimize(); s.flush(); "
        "print(json.dumps([before, s.info().indexed_vectors_count, s.info().points_count])); "
        "s.close()"
    )
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
    )
    before, after, points = json.loads(done.stdout.strip().splitlines()[-1])
    info.update(
        hnsw_seconds=round(time.perf_counter() - started, 1),
        indexed_vectors_before=before,
        indexed_vectors_after=after,
        points=points,
    )
    (store / "build.json").write_text(json.dumps(info, indent=2), encoding="utf-8")
    return info


async def serve(data: Path, tier: str, texts: list[str]) -> dict[str, Any]:
    extra = {"FERREX_RETRIEVAL__HNSW_BUILD_MIN_UNINDEXED": "0"}  # built already: none during
    params = ferrex_params(data, tier, extra)
    out: dict[str, Any] = {}
    started = time.perf_counter()
    async with Client(params, mode="legacy") as client:
        await client.call_tool("stats", {})  # the model and the store open
        out["open_seconds"] = round(time.perf_counter() - started, 2)
        out["memory_open_mb"] = server_memory()
        brief, detailed = [], []
        for _ in range(5):
            start = time.perf_counter()
            await client.call_tool("stats", {})
            brief.append(time.perf_counter() - start)
            start = time.perf_counter()
            answer = await client.call_tool("stats", {"detailed": True})
            detailed.append(time.perf_counter() - start)
        out["stats_brief"], out["stats_detailed"] = summary(brief), summary(detailed)
        out["index"] = (answer.structured_content or {}).get("index")
        for text in texts[:10]:  # warm-up (the first calls load what the recall path needs)
            await client.call_tool("recall", {"query": text + " warm", "limit": 10})
        samples = []
        for text in texts:
            start = time.perf_counter()
            result = await client.call_tool("recall", {"query": text, "limit": 10})
            samples.append(time.perf_counter() - start)
            if result.is_error:
                raise RuntimeError(f"recall failed: {result.content}")
        out["recall"] = summary(samples)
        out["memory_mb"] = server_memory()
    return out


def server_memory() -> dict[str, float] | None:
    served = [
        p for p in children_of(os.getpid()) if "ferrex" in Path(f"/proc/{p}/cmdline").read_text()
    ]
    readings = sorted((memory_mb(pid) for pid in served), key=lambda m: m["rss"])
    return readings[-1] if readings else None


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("store", type=Path, help="a cached bench store (its data dir's parent)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--model-tier", default="small")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--no-graph", action="store_true", help="serve the store as built: brute-force search"
    )
    args = parser.parse_args()
    store = args.store.expanduser()
    info = build_info(store) if args.no_graph else build_graph(store)
    row: dict[str, Any] = {"store": store.name, "build": info, "disk": disk(store / "data")}
    row["graph"] = not args.no_graph
    row["served"] = asyncio.run(serve(store / "data", args.model_tier, queries(args.queries, 12)))
    row["load_average"] = os.getloadavg()
    text = json.dumps(row, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
