"""Latency of store / recall / stats on a growing store, as ratios against the model's own time.

    python bench/latency.py [--sizes 1000 10000] [--queries 200] [--model-tier small]

For each store size: bulk-load synthetic but varied memories through ``store_many``, then time
single ``store`` calls, ``recall`` calls (hybrid, cache disabled so every call does the work) and
``stats`` (brief and detailed). The embedding model's own time for one document / one query is
measured in the same run, so the results read as "recall costs N x one query embedding" —
comparable across machines. Writes a JSON file to ``bench/results/``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ferrex.bootstrap import Options, build_service  # noqa: E402
from ferrex.config import load_settings  # noqa: E402
from ferrex.logs import configure  # noqa: E402

WORDS = [
    "api",
    "server",
    "billing",
    "invoice",
    "deploy",
    "staging",
    "database",
    "replica",
    "migration",
    "index",
    "cache",
    "queue",
    "worker",
    "latency",
    "timeout",
    "deadlock",
    "pool",
    "semaphore",
    "tokio",
    "rust",
    "python",
    "react",
    "dashboard",
    "kafka",
    "redis",
    "postgres",
    "incident",
    "outage",
    "rollback",
    "release",
    "review",
    "customer",
    "refund",
    "stripe",
    "webhook",
    "certificate",
    "dns",
    "proxy",
    "kubernetes",
    "node",
    "cluster",
    "memory",
    "leak",
    "profile",
    "benchmark",
    "flaky",
    "test",
    "pipeline",
    "runner",
    "artifact",
]
PEOPLE = ["Ana", "Bo", "Chen", "Dara", "Eli", "Femi", "Gus", "Hana", "Ivo", "Juno", "Kai", "Lea"]


def sentence(rng: random.Random, serial: int) -> str:
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16)))
    return f"{rng.choice(PEOPLE)} noted {words} (ref {serial})"


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50_ms": statistics.median(ordered) * 1000, "p95_ms": p95 * 1000}


def timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def run_size(size: int, queries: int, tier: str, rng: random.Random) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        settings, _ = load_settings(
            cli={
                "data_dir": tmp,
                "model_tier": tier,
                "offline": True,
                "rerank": False,
                "cache.enabled": False,
            }
        )
        service = build_service(settings, Options(explicit_model_tier=True))
        try:
            service.ensure_ready()
            start = time.perf_counter()
            loaded = 0
            serial = 0
            while loaded < size:
                batch = [
                    {"content": sentence(rng, serial + i)} for i in range(min(512, size - loaded))
                ]
                serial += len(batch)
                loaded += sum(1 for r in service.store_many(batch) if "error" not in r)
            ingest_s = time.perf_counter() - start
            embed_doc = timed(lambda: service.embedder.embed_documents([sentence(rng, -1)]), 50)
            embed_query = timed(lambda: service.embedder.embed_query(sentence(rng, -2)), 50)
            store_times = []
            for _ in range(50):
                payload = {"content": sentence(rng, serial)}
                serial += 1
                t0 = time.perf_counter()
                try:
                    service.store(payload)
                except Exception:
                    continue
                store_times.append(time.perf_counter() - t0)
            texts = [sentence(rng, -3) for _ in range(queries)]
            recall_times = []
            for text in texts:
                t0 = time.perf_counter()
                service.recall({"query": text, "limit": 10})
                recall_times.append(time.perf_counter() - t0)
            brief = timed(lambda: service.stats({}), 10)
            detailed = timed(lambda: service.stats({"detailed": True}), 5)
            model_doc = statistics.median(embed_doc)
            model_query = statistics.median(embed_query)
            result = {
                "size": size,
                "ingest_per_second": round(size / ingest_s, 1),
                "embed_document": percentiles(embed_doc),
                "embed_query": percentiles(embed_query),
                "store": percentiles(store_times),
                "recall": percentiles(recall_times),
                "stats_brief": percentiles(brief),
                "stats_detailed": percentiles(detailed),
            }
            result["store"]["x_model"] = result["store"]["p50_ms"] / (model_doc * 1000)
            result["recall"]["x_model"] = result["recall"]["p50_ms"] / (model_query * 1000)
            return result
        finally:
            service.close()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--model-tier", default="small")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    configure("error")
    rng = random.Random(args.seed)
    rows = [run_size(size, args.queries, args.model_tier, rng) for size in args.sizes]
    header = (
        "memories",
        "ingest/s",
        "embed q",
        "recall p50",
        "p95",
        "x model",
        "store p50",
        "x model",
        "stats",
        "detailed",
    )
    print(" ".join(f"{h:>10}" for h in header))
    for row in rows:
        cells = (
            f"{row['size']}",
            f"{row['ingest_per_second']:.0f}",
            f"{row['embed_query']['p50_ms']:.1f}ms",
            f"{row['recall']['p50_ms']:.1f}ms",
            f"{row['recall']['p95_ms']:.1f}ms",
            f"{row['recall']['x_model']:.1f}x",
            f"{row['store']['p50_ms']:.1f}ms",
            f"{row['store']['x_model']:.1f}x",
            f"{row['stats_brief']['p50_ms']:.0f}ms",
            f"{row['stats_detailed']['p50_ms']:.0f}ms",
        )
        print(" ".join(f"{c:>10}" for c in cells))
    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    payload = {
        "date": stamp,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "model_tier": args.model_tier,
        "rows": rows,
    }
    path = out_dir / f"latency-{stamp}.json"
    path.write_text(json.dumps(payload, indent=2), encoding="utf-8")
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
