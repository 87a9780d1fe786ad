"""What a retrieval setting costs: in-process recall latency of settings variants, paired.

    python bench/recall_cost.py --sizes 1000 10000 \
        --variant 'off:retrieval.neighbours.weight=0' --variant 'default:'

Takes the cached store of each size (``bench/stores.py``; ``--store DIR`` for another, e.g. one
``ferrex rebuild-index`` gave the late-interaction channel), copies it, and asks the same
queries in-process under each variant (``key=value`` overrides of the live settings, applied
in turn on the same service, the recall and query-embedding caches off), the variants' order
alternating query by
query so that the machine's load hits all alike. Prints p50 / p95 per variant and the median
of the per-query differences against the first variant.
Writes ``bench/results/recall-cost-<stamp>.json``.
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
from late_cost import quantile  # noqa: E402
from stores import (  # noqa: E402
    cached_store,
    copy_store,
    open_service,
    settings_overrides,
)
from sweep import apply  # noqa: E402  (a variant's overrides on the live settings)


def parse_variant(text: str) -> tuple[str, list[tuple[str, Any]]]:
    name, _, rest = text.partition(":")
    return name.strip(), settings_overrides([p for p in rest.split(",") if p.strip()])


def measure(
    store: Path, variants: list[tuple[str, list[tuple[str, Any]]]], count: int, tier: str
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ferrex-cost-") as tmp:
        service = open_service(copy_store(store, Path(tmp)), tier)
        try:
            service.cache.enabled = False
            base = service.settings.retrieval.model_copy(deep=True)
            texts = queries(count, seed=11)
            for text in texts[:10]:
                for _, overrides in variants:
                    apply(service, base, overrides)
                    run_tool(service, "recall", {"query": text + " warm", "limit": 10})
            times: dict[str, list[float]] = {name: [] for name, _ in variants}
            for n, text in enumerate(texts):
                order = variants if n % 2 == 0 else variants[::-1]
                for name, overrides in order:
                    apply(service, base, overrides)
                    service.cache.queries.clear()  # every call embeds its query
                    start = time.perf_counter()
                    run_tool(service, "recall", {"query": text, "limit": 10})
                    times[name].append((time.perf_counter() - start) * 1000)
            memories = service.meta.count_memories()
            late = service.index.late_interaction
        finally:
            service.close()
    first = variants[0][0]
    return {
        "memories": memories,
        "late_interaction_index": late,
        "variants": {
            name: {
                "p50": round(quantile(values, 0.5), 2),
                "p95": round(quantile(values, 0.95), 2),
                "p50_added": round(
                    statistics.median(a - b for a, b in zip(values, times[first], strict=True)), 2
                ),
            }
            for name, values in times.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000])
    parser.add_argument("--store", type=Path, default=None, help="a store dir (has data/)")
    parser.add_argument("--variant", action="append", default=[], help="name:key=value,...")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--model-tier", default="small")
    args = parser.parse_args()
    configure("error")
    variants = [parse_variant(v) for v in args.variant] or [("default", [])]
    runs = []
    stores = (
        [args.store]
        if args.store
        else [cached_store(s, args.seed, args.model_tier) for s in args.sizes]
    )
    for store in stores:
        result = measure(store, variants, args.queries, args.model_tier)
        runs.append(result)
        print(f"{result['memories']:,} memories (late channel: {result['late_interaction_index']})")
        print("| variant | recall p50 | p95 | p50 added (paired) |\n|---|---|---|---|")
        for name, row in result["variants"].items():
            print(f"| {name} | {row['p50']} ms | {row['p95']} ms | {row['p50_added']:+} ms |")
    out = BENCH / "results" / f"recall-cost-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"variants": args.variant, "runs": runs}, indent=1) + "\n")
    print(f"wrote {out.relative_to(BENCH.parent)}")


if __name__ == "__main__":
    main()
