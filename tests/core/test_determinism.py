"""Determinism: an identical request on an identical store gives identical results and order.

Proves that 100 repeated recalls (with and without filters, explain, the recall cache cleared or
not) return the same ids, scores and order; that equal scores are ordered by memory id; that a
second service re-opened on the same data returns exactly the same answers; and that repeated
recalls through the MCP server agree with each other and with the in-process answers.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.support.harness import ServiceFactory, call, mcp_client

from ferrex.core.ops.rebuild import rebuild
from ferrex.core.service import MemoryService
from ferrex.server.calls import run_tool as invoke

NOW = datetime(2026, 4, 6, 12, 0, tzinfo=UTC)
REPEATS = 100

TEXTS = (
    "The nightly backup job copies the invoices database to cold storage",
    "Backups of the invoices database are verified every Sunday",
    "The staging cluster runs the same backup job with a smaller retention",
    "Alice owns the backup runbook and reviews it each quarter",
    "Restoring from cold storage took four hours during the March drill",
    "The backup job failed twice last week because the disk was full",
    "We compress backups with zstd before uploading them",
    "A restore drill is scheduled at the end of every quarter",
)
REQUESTS: tuple[dict[str, Any], ...] = (
    {"query": "backup job"},
    {"query": "restore drill cold storage", "limit": 5, "explain": True},
    {"query": "who owns the runbook", "types": ["episodic", "semantic"], "include_stale": True},
    {"query": "backup", "time_range": {"after": "2026-03-01", "before": "2026-04-06"}},
    {"query": "database", "max_tokens": 60},
)


def populate(service: MemoryService) -> None:
    for age, text in enumerate(TEXTS):
        when = (NOW - timedelta(days=3 * age)).isoformat()
        invoke(service, "store", {"content": text, "timestamp": when, "entities": ["backups"]})
    invoke(
        service, "store", {"subject": "backup runbook", "predicate": "owned by", "object": "Alice"}
    )
    invoke(
        service,
        "store",
        {"type": "procedural", "name": "restore", "steps": ["fetch", "decrypt", "load"]},
    )


def fingerprint(answer: dict[str, Any]) -> list[tuple[str, float]]:
    return [(item["id"], item["score"]) for item in answer["results"]]


def recall_stable_part(answer: dict[str, Any]) -> dict[str, Any]:
    """The whole answer except the bookkeeping that legitimately moves between calls."""
    out = {k: v for k, v in answer.items() if k != "cache_hit"}
    out["results"] = [
        {k: v for k, v in item.items() if k != "freshness"}
        | {"staleness": item["freshness"]["staleness"]}
        for item in answer["results"]
    ]
    return out


@pytest.fixture
def store_dir(make_service: ServiceFactory, tmp_path: Path) -> Path:
    data_dir = tmp_path / "det"
    service = make_service(data_dir, clock=lambda: NOW)
    populate(service)
    service.close()
    return data_dir


def test_one_hundred_identical_recalls_give_identical_ids_scores_and_order(
    make_service: ServiceFactory, store_dir: Path
) -> None:
    # No result cache and a cleared query-embedding cache: every one of the 100 repeats runs
    # the model, both engine channels, fusion and ordering again.
    service = make_service(store_dir, clock=lambda: NOW, cache={"enabled": False})
    for request in REQUESTS:
        first = recall_stable_part(invoke(service, "recall", dict(request)))
        assert first["results"], request
        for repeat in range(REPEATS):
            service.cache.queries.clear()
            again = recall_stable_part(invoke(service, "recall", dict(request)))
            assert again == first, (request, repeat)
        assert service.cache.stats()["hits"] == 0


def test_equal_fused_scores_are_ordered_by_memory_id(
    make_service: ServiceFactory, tmp_path: Path
) -> None:
    """Two memories that tie exactly in RRF (one wins the dense channel, the other BM25) come
    back in id order, whichever of them was stored first (RRF ordering, retrieval.fusion =
    "rrf"; the default orders by relevance, which these two do not tie on)."""
    service = make_service(tmp_path / "ties", clock=lambda: NOW, **{"retrieval.fusion": "rrf"})
    query = "backup of the invoices"
    dense_winner = "Nightly copies of all billing records are archived, including invoices"
    bm25_winner = "backup backup backup: the garden shed key is kept under the backup flower pot"
    for round_ in range(4):
        namespace = f"ties{round_}"
        texts = [dense_winner, bm25_winner] if round_ % 2 else [bm25_winner, dense_winner]
        for text in texts:
            invoke(
                service,
                "store",
                {"content": text, "namespace": namespace, "timestamp": NOW.isoformat()},
            )
        for _ in range(10):
            service.cache.invalidate()
            results = invoke(
                service, "recall", {"query": query, "namespace": namespace, "explain": True}
            )
            ranks = [
                (r["explain"]["dense_rank"], r["explain"]["bm25_rank"]) for r in results["results"]
            ]
            assert sorted(ranks) == [(1, 2), (2, 1)], ranks  # a genuine tie, not a win
            fused = {r["explain"]["fused_score"] for r in results["results"]}
            assert len(fused) == 1
            ids = [r["id"] for r in results["results"]]
            assert ids == sorted(ids)


def test_a_reopened_service_returns_exactly_the_same_answers(
    make_service: ServiceFactory, store_dir: Path
) -> None:
    first = make_service(store_dir, clock=lambda: NOW)
    answers = [recall_stable_part(invoke(first, "recall", dict(r))) for r in REQUESTS]
    first.close()
    second = make_service(store_dir, clock=lambda: NOW)
    for request, expected in zip(REQUESTS, answers, strict=True):
        assert recall_stable_part(invoke(second, "recall", dict(request))) == expected, request


def test_a_rebuilt_index_ranks_exactly_as_before(
    make_service: ServiceFactory, store_dir: Path
) -> None:
    """Rebuilding re-inserts every point in a new order; equal scores (common in BM25: facts
    sharing subject and predicate words) must still be ordered the same way."""
    service = make_service(store_dir, clock=lambda: NOW)
    invoke(
        service, "store", {"subject": "backup runbook", "predicate": "owned by", "object": "Bob"}
    )
    invoke(
        service,
        "store",
        {"subject": "backup runbook", "predicate": "reviewed by", "object": "Carol"},
    )
    requests = [*REQUESTS, {"query": "who owns the backup runbook", "explain": True}]
    before = [recall_stable_part(invoke(service, "recall", dict(r))) for r in requests]
    rebuild(service)
    service.cache.invalidate()
    after = [recall_stable_part(invoke(service, "recall", dict(r))) for r in requests]
    assert after == before


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_repeated_recalls_over_mcp_agree(
    store_dir: Path, models_dir: Path, anyio_backend: str
) -> None:
    async with mcp_client(store_dir, models_dir, FERREX_LOG="error") as client:
        for request in REQUESTS[:3]:
            replies = [await call(client, "recall", dict(request)) for _ in range(10)]
            assert "error" not in replies[0], replies[0]
            prints = [fingerprint(r) for r in replies]
            assert prints[0] and all(p == prints[0] for p in prints), request
