"""One digest of many recall answers: proof that a change to recall leaves every answer as it was.

    python bench/digest.py --size 1000 [--queries 300]

Takes the cached store of the size (``bench/stores.py``), copies it, opens it with a fixed clock
and the recall cache on, and asks ``--queries`` questions (``bench/corpus.py``) through the tool
path (``run_tool``) with a mix of arguments: explain on all, limit 10, every 3rd with a
``types`` filter, every 7th with a token budget, every 11th over a time range, every 13th with
``include_stale``; then asks the first 30 again (answered from the recall cache). Prints one
sha256 over the JSON answers (keys sorted) and how many results they hold. Access bumps wait in
memory for the whole run (the tracker's thread is stopped), so no answer depends on when a
batch of them was written.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
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

CLOCK = datetime(2026, 12, 1, tzinfo=UTC)
TYPES = (["semantic"], ["episodic"], ["procedural", "semantic"])
REPEATS = 30


def arguments(index: int, query: str) -> dict[str, Any]:
    """The recall arguments of the ``index``-th question."""
    args: dict[str, Any] = {"query": query, "limit": 10, "explain": True}
    if index % 3 == 0:
        args["types"] = TYPES[(index // 3) % len(TYPES)]
    if index % 7 == 0:
        args["max_tokens"] = 300
    if index % 11 == 0:
        args["time_range"] = {"after": "2020-01-01", "before": "2026-11-01"}
    if index % 13 == 0:
        args["include_stale"] = True
    return args


def digest(size: int, count: int, seed: int, tier: str) -> tuple[str, int, int]:
    """(sha256 of the answers, answers, results in them)."""
    cached = cached_store(size, 7, tier)
    calls = [arguments(i, q) for i, q in enumerate(queries(count, seed=seed))]
    calls += calls[:REPEATS]
    sha = hashlib.sha256()
    results = 0
    with tempfile.TemporaryDirectory(prefix="ferrex-digest-") as tmp:
        data = copy_store(cached, Path(tmp))
        service = open_service(data, tier, ["cache.enabled=true"])
        service.clock = lambda: CLOCK
        service.deps.access.stop()
        try:
            for args in calls:
                answer = run_tool(service, "recall", dict(args))
                results += len(answer.get("results", []))
                sha.update(json.dumps(answer, sort_keys=True).encode("utf-8"))
                sha.update(b"\n")
        finally:
            service.close()
    return sha.hexdigest(), len(calls), results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--model-tier", default="small")
    args = parser.parse_args()
    configure("error")
    sha, answers, results = digest(args.size, args.queries, args.seed, args.model_tier)
    print(f"size {args.size}: {answers} answers, {results} results, sha256 {sha}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
