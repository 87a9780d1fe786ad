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


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def measure(
    size: int,
    count: int,
    seed: int,
    tier: str,
    *,
    with_only: bool = False,
    hnsw: bool = False,
    store_dir: Path | None = None,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ferrex-late-") as tmp:
        data = copy_store(store_dir or cached_store(size, seed, tier), Path(tmp))
        service = open_service(data, tier)
        try:
            service.cache.enabled = False
            late = service.settings.retrieval.late_interaction
            sizes: dict[bool, int | None] = {False: None}
            seconds: dict[bool, float | None] = {False: None}
            optimize_s: float | None = None
            embed_ms: list[float] = []
            store: dict[bool, list[float]] = {True: [], False: []}
            fresh = [t + f" (note {n})" for n, t in enumerate(queries(2 * 60, seed=23))]
            for enabled in (True,) if with_only else (False, True):
                # The same rebuild, without and with the channel.
                late.enabled = enabled
                started = time.perf_counter()
                service.sync.rebuild()
                seconds[enabled] = time.perf_counter() - started
                if hnsw and enabled:  # the dense graph, as the background builder makes it
                    started = time.perf_counter()
                    service.index.optimize()
                    optimize_s = time.perf_counter() - started
                assert service.index.late_interaction is enabled
                service.index.flush()  # type: ignore[attr-defined]
                sizes[enabled] = blocks(data / "index", wal=False)
                # Stores on this index (points get token vectors once it has the channel:
                # the same model pass, pooled, written), beside the document's embedding
                # alone, alternated on fresh texts.
                for text in (fresh[:60] if enabled else fresh[60:]) if not with_only else []:
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
            rss = rss_bytes()
        finally:
            service.close()
    on, off = recall[True], recall[False]
    without = sizes[False]
    rebuild_without = seconds[False]
    return {
        "size": size,
        "memories": memories,
        "rebuild_seconds": {
            "without": None if rebuild_without is None else round(rebuild_without, 1),
            "with": round(seconds[True] or 0.0, 1),
        },
        "optimize_seconds": None if optimize_s is None else round(optimize_s, 1),
        "recall_ms": {
            "on": {"p50": quantile(on, 0.5), "p95": quantile(on, 0.95)},
            "off": {"p50": quantile(off, 0.5), "p95": quantile(off, 0.95)},
            "p50_added": statistics.median(a - b for a, b in zip(on, off, strict=True)),
        },
        "index_bytes_per_memory": {
            "without": None if without is None else without / memories,
            "with": (sizes[True] or 0) / memories,
        },
        "store_ms": None
        if with_only
        else {
            "on": quantile(store[True], 0.5),
            "off": quantile(store[False], 0.5),
            "embed": quantile(embed_ms, 0.5),
        },
        "rss_bytes": rss,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--model-tier", default="small")
    parser.add_argument("--with-only", action="store_true", help="one rebuild, with the channel")
    parser.add_argument("--hnsw", action="store_true", help="build the dense graph after it")
    parser.add_argument(
        "--store",
        type=Path,
        default=None,
        help="a cached store directory to use (e.g. the composed 100k one of bench/stores.py)",
    )
    args = parser.parse_args()
    configure("warning")
    rows = [
        measure(
            size,
            args.queries,
            args.seed,
            args.model_tier,
            with_only=args.with_only,
            hnsw=args.hnsw,
            store_dir=args.store,
        )
        for size in args.sizes
    ]
    print(
        "| memories | rebuild without / with (s) | recall p50 on / off (ms) | p50 added | "
        "p95 on / off | index bytes per memory without / with (segments) | "
        "store p50 on / off ÷ embed p50 | RSS (MB) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        ms, size, st, rb = (
            r["recall_ms"],
            r["index_bytes_per_memory"],
            r["store_ms"],
            r["rebuild_seconds"],
        )
        without = "–" if size["without"] is None else f"{size['without']:,.0f}"
        stores = (
            "–"
            if st is None
            else f"{st['on']:.1f} / {st['off']:.1f} ÷ {st['embed']:.1f} = "
            f"{st['on'] / st['embed']:.2f}× / {st['off'] / st['embed']:.2f}×"
        )
        print(
            f"| {r['memories']:,} | {rb['without'] or '–'} / {rb['with']} | "
            f"{ms['on']['p50']:.2f} / {ms['off']['p50']:.2f} | {ms['p50_added']:+.2f} | "
            f"{ms['on']['p95']:.2f} / {ms['off']['p95']:.2f} | {without} / "
            f"{size['with']:,.0f} | {stores} | {r['rss_bytes'] / 2**20:,.0f} |"
        )
    out = BENCH / "results"
    out.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = out / f"late-cost-{stamp}.json"
    path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
