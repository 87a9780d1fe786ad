"""Golden-set regression runner: store ``memories.json`` through the MemoryService, run
``queries.json``, report recall@3 (the spec's gate is 0.7).

    python golden_set/run_golden.py                      # offline MiniLM, no reranker
    python golden_set/run_golden.py --reranker-path DIR  # with a local cross-encoder

The clock is fixed (``NOW``) so results do not drift as the calendar moves.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
K = 3
GATE = 0.7


@dataclass
class GoldenReport:
    recall_at_k: float
    reranked: bool
    per_query: list[dict[str, Any]] = field(default_factory=list)


def load() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    memories = json.loads((HERE / "memories.json").read_text(encoding="utf-8"))
    queries = json.loads((HERE / "queries.json").read_text(encoding="utf-8"))
    return memories, queries


def store_all(service: Any, memories: list[dict[str, Any]]) -> dict[str, str]:
    """Store every golden memory (bulk path of the MemoryService); return key -> memory id."""
    payloads = [{k: v for k, v in m.items() if k != "key"} for m in memories]
    from ferrex.server.calls import store_many

    results = store_many(service, payloads)
    ids: dict[str, str] = {}
    for memory, result in zip(memories, results, strict=True):
        if "error" in result:
            raise RuntimeError(f"golden memory {memory['key']} was rejected: {result['error']}")
        ids[memory["key"]] = result["id"]
    return ids


def evaluate(
    service: Any, ids: dict[str, str], queries: list[dict[str, Any]], k: int = K
) -> GoldenReport:
    from ferrex.server.calls import run_tool

    key_of = {v: k_ for k_, v in ids.items()}
    hits = 0.0
    per_query = []
    reranked = False
    for query in queries:
        arguments: dict[str, Any] = {
            "query": query["query"],
            "limit": k,
            "include_stale": True,
            "explain": True,  # says whether the reranker ordered the results
        }
        if query.get("types"):
            arguments["types"] = query["types"]
        response = run_tool(service, "recall", arguments)
        reranked = reranked or response["explain"]["reranked"]
        returned = [key_of.get(r["id"], r["id"]) for r in response["results"]]
        expected = query["expected"]
        found = sum(1 for e in expected if e in returned) / len(expected)
        hits += found
        per_query.append(
            {"query": query["query"], "expected": expected, "returned": returned, "recall": found}
        )
    return GoldenReport(hits / len(queries), reranked, per_query)


def run(service: Any) -> GoldenReport:
    memories, queries = load()
    ids = store_all(service, memories)
    return evaluate(service, ids, queries)


def _service(data_dir: Path, reranker_path: str | None, model_tier: str) -> Any:
    sys.path.insert(0, str(HERE.parent / "src"))
    from ferrex.bootstrap import Options, build_service
    from ferrex.config import load_settings
    from ferrex.logs import configure

    configure("warning")
    cli: dict[str, Any] = {
        "data_dir": str(data_dir),
        "model_tier": model_tier,
        "rerank": reranker_path is not None,
    }
    if reranker_path:
        cli["reranker_path"] = reranker_path
    settings, _ = load_settings(cli=cli)
    service = build_service(settings, Options(explicit_model_tier=True))
    service.clock = lambda: NOW
    return service


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reranker-path", help="local ONNX cross-encoder directory")
    parser.add_argument("--model-tier", default="small")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        service = _service(Path(tmp), args.reranker_path, args.model_tier)
        try:
            report = run(service)
        finally:
            service.close()
    print(
        f"golden set: recall@{K} = {report.recall_at_k:.3f} (gate {GATE}); "
        f"reranked: {report.reranked}"
    )
    for item in report.per_query:
        if args.verbose or item["recall"] < 1.0:
            print(
                f"  {item['recall']:.2f}  {item['query']}\n"
                f"        expected {item['expected']} got {item['returned']}"
            )
    return 0 if report.recall_at_k >= GATE else 1


if __name__ == "__main__":
    raise SystemExit(main())
