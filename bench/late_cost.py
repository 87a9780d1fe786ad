"""What the late-interaction channel costs: recall latency with it on and off, and its storage.

    python bench/late_cost.py --sizes 1000 10000 [--queries 200]

Takes the cached store of each size (``bench/stores.py``: realistic LoCoMo / SciFact memories),
copies it, rebuilds its index without and then with the channel (``IndexSync.rebuild``, what
``ferrex rebuild-index`` runs; timed; disk blocks of the index's segments after each, the
write-ahead log left out), stores 60 fresh texts after each rebuild beside the document
embedding alone, then asks the same queries in-process with the channel on and off in
alternation (a query-time switch on the same store: ``retrieval.late_interaction.enabled``), the
recall cache off. Prints p50 / p95 and the differences.
Writes ``bench/results/late-cost-<stamp>.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "src"))
sys.path.insert(0, str(BENCH))

from corpus import queries  # noqa: E402
from ferrex.logs import configure  # noqa: E402
from ferrex.server.calls import run_tool  # noqa: E402
from stores import cached_store, copy_store, open_service  # noqa: E402


def blocks(path: Path, *, wal: bool = True) -> int:
    """Disk blocks of the index's files (``wal`` False: its segments only, without the
    write-ahead log, which the engine keeps at its capacity whatever the data)."""
    return sum(
        f.stat().st_blocks * 512
        for f in path.rglob("*")
        if f.is_file() and (wal or "wal" not in f.relative_to(path).parts)
    )


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(size: int, count: int, seed: int, tier: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ferrex-late-") as tmp:
        data = copy_store(cached_store(size, seed, tier), Path(tmp))
        service = open_service(data, tier)
        try:
            service.cache.enabled = False
            late = service.settings.retrieval.late_interaction
            sizes: dict[bool, int] = {}
            seconds: dict[bool, float] = {}
            embed_ms: list[float] = []
            store: dict[bool, list[float]] = {True: [], False: []}
            fresh = [t + f" (note {n})" for n, t in enumerate(queries(2 * 60, seed=23))]
            for enabled in (False, True):  # the same rebuild, without and with the channel
                late.enabled = enabled
                started = time.perf_counter()
                service.sync.rebuild()
                seconds[enabled] = time.perf_counter() - started
                assert service.index.late_interaction is enabled
                service.index.flush()  # type: ignore[attr-defined]
                sizes[enabled] = blocks(data / "index", wal=False)
                # Stores on this index (points get token vectors once it has the channel:
                # the same model pass, pooled, written), beside the document's embedding
                # alone, alternated on fresh texts.
                for text in fresh[:60] if enabled else fresh[60:]:
                    start = time.perf_counter()
                    service.embedder.embed_documents([text])
                    embed_ms.append((time.perf_counter() - start) * 1000)
                    start = time.perf_counter()
                    run_tool(service, "store", {"content": text})
                    store[enabled].append((time.perf_counter() - start) * 1000)
            texts = queries(count, seed=11)
            for text in texts[:10]:
                run_tool(service, "recall", {"query": text + " warm", "limit": 10})
            recall: dict[bool, list[float]] = {True: [], False: []}
            for text in texts:
                for enabled in (True, False):
                    late.enabled = enabled
                    start = time.perf_counter()
                    run_tool(service, "recall", {"query": text, "limit": 10})
                    recall[enabled].append((time.perf_counter() - start) * 1000)
            memories = service.meta.count_memories()
        finally:
            service.close()
    on, off = recall[True], recall[False]
    return {
        "size": size,
        "memories": memories,
        "rebuild_seconds": {"without": round(seconds[False], 1), "with": round(seconds[True], 1)},
        "recall_ms": {
            "on": {"p50": quantile(on, 0.5), "p95": quantile(on, 0.95)},
            "off": {"p50": quantile(off, 0.5), "p95": quantile(off, 0.95)},
            "p50_added": statistics.median(a - b for a, b in zip(on, off, strict=True)),
        },
        "index_bytes_per_memory": {
            "without": sizes[False] / memories,
            "with": sizes[True] / memories,
        },
        "store_ms": {
            "on": quantile(store[True], 0.5),
            "off": quantile(store[False], 0.5),
            "embed": quantile(embed_ms, 0.5),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--model-tier", default="small")
    args = parser.parse_args()
    configure("warning")
    rows = [measure(size, args.queries, args.seed, args.model_tier) for size in args.sizes]
    print(
        "| memories | rebuild without / with (s) | recall p50 on / off (ms) | p50 added | "
        "p95 on / off | index bytes per memory without / with (segments) | "
        "store p50 on / off ÷ embed p50 |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        ms, size, st, rb = (
            r["recall_ms"],
            r["index_bytes_per_memory"],
            r["store_ms"],
            r["rebuild_seconds"],
        )
        print(
            f"| {r['memories']:,} | {rb['without']} / {rb['with']} | {ms['on']['p50']:.2f} / "
            f"{ms['off']['p50']:.2f} | {ms['p50_added']:+.2f} | {ms['on']['p95']:.2f} / "
            f"{ms['off']['p95']:.2f} | {size['without']:,.0f} / {size['with']:,.0f} | "
            f"{st['on']:.1f} / {st['off']:.1f} ÷ {st['embed']:.1f} = "
            f"{st['on'] / st['embed']:.2f}× / {st['off'] / st['embed']:.2f}× |"
        )
    out = BENCH / "results"
    out.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = out / f"late-cost-{stamp}.json"
    path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
