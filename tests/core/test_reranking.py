"""Reranking plumbing, explain, token budget and limits (issue 3).

The cross-encoder here is the TEST MODEL of ``tests/support/tiny_cross_encoder.py`` (no trained
weights: it scores documents by occurrences of "zebra"), run through the real fastembed
``TextCrossEncoder`` + onnxruntime path via ``--reranker-path``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest
from tests.support.harness import ServiceFactory, call, mcp_client, ok
from tests.support.tiny_cross_encoder import build_tiny_cross_encoder

from ferrex.embed.reranker import FastEmbedReranker
from ferrex.server.calls import run_tool as invoke
from ferrex.server.calls import store_many

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
INCIDENTS = [
    "the ingest worker ran out of memory on node 3 and was restarted by systemd",
    "ingest latency doubled after the kafka partition count was raised",
    "a memory leak in the json parser made the ingest worker crash nightly",
    "the ingest queue backed up because the database disk was full",
    "OOM killer terminated the ingest worker during the backfill job",
    "the worker pool was resized from 8 to 16 processes to absorb load",
    "ingest errors spiked when the upstream API changed its date format",
    "a stuck lock in redis blocked the ingest scheduler for an hour",
    "memory limits for the ingest container were raised to 4 GiB",
    "the ingest service was rolled back to version 1.8 after crashes",
    "swap usage on the ingest hosts grew until the workers slowed down",
    "heap profiling showed the ingest worker cached every payload forever",
]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny-cross-encoder"))


def _reranker(tiny_model: Path, models_dir: Path) -> FastEmbedReranker:
    return FastEmbedReranker("default", models_dir, reranker_path=tiny_model, offline=True)


ANIMALS = [
    "the savanna tour spotted lions resting under an acacia tree",
    "a herd of elephants crossed the river at dawn during the safari",
    "our guide said a zebra foal can stand within an hour of birth",
    "giraffes browse the tallest branches that other animals cannot reach",
    "the safari jeep broke down near the watering hole with the hippos",
]


def test_reranker_reorders_the_fused_head(
    make_service: ServiceFactory, tiny_model: Path, models_dir: Path
) -> None:
    # No relevance floor: this test compares the same candidates in two orders.
    plain = make_service(clock=lambda: NOW, **{"retrieval.min_score": 0})
    reranked = make_service(
        clock=lambda: NOW,
        reranker=_reranker(tiny_model, models_dir),
        rerank=True,
        **{"retrieval.min_score": 0},
    )
    for service in (plain, reranked):
        store_many(
            service, [{"content": text, "timestamp": "2026-11-28T10:00:00Z"} for text in ANIMALS]
        )
    query = {"query": "what animals did we see on the safari", "limit": 5, "explain": True}
    without = invoke(plain, "recall", query)
    with_rerank = invoke(reranked, "recall", query)
    assert without["explain"]["reranked"] is False
    assert without["explain"]["score_basis"] == "fused"
    assert without["explain"]["rerank_status"]
    assert with_rerank["explain"]["reranked"] is True
    assert with_rerank["explain"]["score_basis"] == "rerank"
    top = with_rerank["results"][0]
    assert "zebra" in top["content"]
    explain = top["explain"]
    assert explain["rerank_score"] == pytest.approx(2.0)  # one "zebra": 4 * 1 - 2
    assert explain["base_score"] == pytest.approx(1 / (1 + 2.718281828459045**-2.0), rel=1e-6)
    # score: p's log-odds moved by the boost's share of the margin, less the margin (the largest
    # boost shows p itself): never above 1, never above p
    from ferrex.core.recall.formulas import order_key, shown_score

    key = order_key(explain["base_score"], explain["recency_boost"], 1.3, 0.75)
    assert explain["final_score"] == pytest.approx(shown_score(key, 0.75), abs=2e-6)
    assert explain["final_score"] <= explain["base_score"]
    assert all(0 <= r["score"] <= 1 for r in with_rerank["results"])
    for item in with_rerank["results"][1:]:
        assert item["explain"]["rerank_score"] == pytest.approx(-2.0)
    # Same candidates either way: reranking reorders, it does not change what was retrieved.
    assert {r["content"] for r in without["results"]} == {
        r["content"] for r in with_rerank["results"]
    }


def test_rerank_window_keeps_fused_order_for_the_rest(
    make_service: ServiceFactory, tiny_model: Path, models_dir: Path
) -> None:
    service = make_service(
        clock=lambda: NOW,
        reranker=_reranker(tiny_model, models_dir),
        rerank=True,
        **{"retrieval.rerank_top_n": 2, "retrieval.min_score": 0},
    )
    texts = [
        "the caravan stopped at the first oasis so the camels could drink",
        "camel drivers argued about the route between two oases",
        "a sandstorm delayed the caravan for a whole afternoon",
        "the oasis market sold dates, salt and woven blankets to the caravan",
        "two camels went lame and the caravan slowed to a walk",
        "water skins were refilled at the oasis well before dusk",
        "the caravan leader counted the camels every morning",
        "travellers rested in the shade of palms at the oasis",
        "at the last oasis a zebra drank next to the camels",
    ]
    store_many(service, [{"content": t, "timestamp": "2026-11-29T10:00:00Z"} for t in texts])
    response = invoke(
        service, "recall", {"query": "caravan camels oasis", "limit": 9, "explain": True}
    )
    scored = [r for r in response["results"] if r["explain"]["rerank_score"] is not None]
    unscored = [r for r in response["results"] if r["explain"]["rerank_score"] is None]
    assert len(scored) == 2 and len(unscored) == len(response["results"]) - 2 >= 5
    # the reranked head comes first, the rest keeps its fused order
    assert response["results"][:2] == scored
    fused_ranks = [r["explain"]["fused_rank"] for r in unscored]
    assert fused_ranks == sorted(fused_ranks)
    # Scores follow the order: the tail scores at most the head's lowest, never rising, no boost.
    scores = [r["score"] for r in response["results"]]
    assert all(a >= b for a, b in pairwise(scores)), scores
    assert all(r["explain"]["recency_boost"] == 1.0 for r in unscored)


def test_procedural_chunks_are_deduplicated_before_rerank(
    make_service: ServiceFactory, tiny_model: Path, models_dir: Path
) -> None:
    service = make_service(
        clock=lambda: NOW, reranker=_reranker(tiny_model, models_dir), rerank=True
    )
    steps = [
        f"step {i}: " + " ".join(["inspect the zebra crossing paint and log the result"] * 6)
        for i in range(12)
    ]
    stored = invoke(
        service, "store", {"type": "procedural", "name": "crossing-audit", "steps": steps}
    )
    assert service.meta.get_memory(stored["id"]).chunk_count == 12
    response = invoke(
        service, "recall", {"query": "zebra crossing inspection", "limit": 10, "explain": True}
    )
    ids = [r["id"] for r in response["results"]]
    assert ids.count(stored["id"]) == 1
    assert response["results"][0]["explain"]["steps"] == steps


def test_unavailable_reranker_is_said_everywhere(service_factory_offline: ServiceFactory) -> None:
    service = service_factory_offline
    invoke(service, "store", {"content": "the reranker status must be visible to the agent"})
    # Said once, where it applies to every call (stats), and per call with explain.
    response = invoke(service, "recall", {"query": "reranker status", "explain": True})
    assert response["explain"]["reranked"] is False
    assert "unavailable" in response["explain"]["rerank_status"]
    detailed = invoke(service, "stats", {"detailed": True})
    assert detailed["reranker"]["available"] is False
    assert "unavailable" in detailed["reranker"]["reason"]
    brief = invoke(service, "stats", {})
    assert any("reranker" in w for w in brief["warnings"])


@pytest.fixture
def service_factory_offline(make_service: ServiceFactory, models_dir: Path):  # type: ignore[no-untyped-def]
    reranker = FastEmbedReranker("default", models_dir, enabled=True, offline=True)
    return make_service(reranker=reranker, rerank=True)


def test_token_budget_cuts_results_in_rank_order(service: object) -> None:
    from ferrex.core.service import MemoryService

    assert isinstance(service, MemoryService)
    stored = store_many(service, [{"content": text} for text in INCIDENTS])
    assert all("error" not in s for s in stored)
    full = invoke(service, "recall", {"query": "ingest worker out of memory", "limit": 12})
    assert len(full["results"]) == 12
    sizes = [service.embedder.count_text_tokens(r["content"]) for r in full["results"]]
    budget = sum(sizes[:4]) + sizes[4] // 2
    cut = invoke(
        service,
        "recall",
        {"query": "ingest worker out of memory", "limit": 12, "max_tokens": budget},
    )
    assert [r["id"] for r in cut["results"]] == [r["id"] for r in full["results"][:4]]
    assert cut["truncated"] == 8
    assert cut["tokens"] == sum(sizes[:4]) <= budget
    everything = invoke(
        service,
        "recall",
        {"query": "ingest worker out of memory", "limit": 12, "max_tokens": 100_000},
    )
    assert everything["truncated"] == 0 and len(everything["results"]) == 12


def varied_sentences(count: int) -> list[str]:
    """Distinct, unrelated sentences (so near-duplicate rejection keeps them all)."""
    people = [
        "Ana",
        "Bo",
        "Chen",
        "Dara",
        "Eli",
        "Femi",
        "Gus",
        "Hana",
        "Ivo",
        "Juno",
        "Kai",
        "Lea",
        "Mo",
        "Nia",
    ]
    acts = [
        "repaired",
        "painted",
        "sold",
        "photographed",
        "measured",
        "shipped",
        "cleaned",
        "tuned",
        "inspected",
        "borrowed",
        "catalogued",
        "weighed",
        "insured",
        "polished",
        "moved",
    ]
    things = [
        "violin",
        "tractor",
        "server rack",
        "sailboat",
        "greenhouse",
        "telescope",
        "bakery oven",
        "bicycle",
        "piano",
        "drone",
        "loom",
        "kayak",
        "printing press",
        "beehive",
        "forklift",
    ]
    out = []
    for i in range(count):
        out.append(
            f"{people[i % len(people)]} {acts[(i // 3) % len(acts)]} "
            f"the {things[(i * 7) % len(things)]} "
            f"(ticket {1000 + i * 37})"
        )
    return out


def test_limit_up_to_200(service: object) -> None:
    from ferrex.core.service import MemoryService

    assert isinstance(service, MemoryService)
    stored = store_many(service, [{"content": text} for text in varied_sentences(230)])
    kept = sum(1 for s in stored if "error" not in s)
    assert kept >= 200
    response = invoke(
        service, "recall", {"query": "who repaired or shipped something", "limit": 200}
    )
    assert len(response["results"]) == 200
    assert len({r["id"] for r in response["results"]}) == 200


pytestmark_anyio = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_reranker_path_through_mcp(
    tmp_path: Path, tiny_model: Path, models_dir: Path
) -> None:
    recent = (datetime.now(UTC) - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    async with mcp_client(tmp_path / "d", models_dir, "--reranker-path", str(tiny_model)) as client:
        for text in ANIMALS:
            await ok(client, "store", {"content": text, "timestamp": recent})
        response = await ok(client, "recall", {"query": "animals on safari", "explain": True})
        assert response["explain"]["reranked"] is True
        assert "zebra" in response["results"][0]["content"]
        stats = await ok(client, "stats", {"detailed": True})
        assert stats["reranker"]["available"] is True
        assert stats["reranker"]["model"].startswith("local:")
    async with mcp_client(tmp_path / "d", models_dir, "--no-rerank") as client:
        response = await call(client, "recall", {"query": "animals on safari", "explain": True})
        assert response["explain"]["reranked"] is False
        assert response["explain"]["rerank_status"] == "reranking disabled (--no-rerank)"


def test_missing_reranker_warns_once_on_stderr(tmp_path: Path, models_dir: Path) -> None:
    """No network, no local file: the server starts anyway, warns once, answers unreranked."""
    from tests.support.wire import handshake, spawn

    process = spawn(tmp_path / "d", models_dir)
    try:
        handshake(process)
        assert process.stdin is not None and process.stdout is not None
        import json

        for number in range(4, 8):
            process.stdin.write(
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": number,
                        "method": "tools/call",
                        "params": {
                            "name": "recall",
                            "arguments": {"query": f"protocol test {number}", "explain": True},
                        },
                    }
                )
                + "\n"
            )
            process.stdin.flush()
            reply = json.loads(process.stdout.readline())
            assert reply["result"]["structuredContent"]["explain"]["reranked"] is False
        process.stdin.close()
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
    assert process.stderr is not None
    stderr = process.stderr.read()
    assert stderr.count("reranker BAAI/bge-reranker-base is unavailable") == 1


def test_models_load_lazily(tmp_path: Path, models_dir: Path) -> None:
    from tests.support.harness import make_settings

    from ferrex.bootstrap import Options, build_service

    settings = make_settings(tmp_path / "d", models_dir, rerank=True)
    service = build_service(settings, Options(explicit_model_tier=True))
    try:
        assert service.embedder.loaded is False  # type: ignore[attr-defined]
        assert service.reranker.available is False
        invoke(service, "recall", {"query": "anything"})  # the first call loads the embedding model
        assert service.embedder.loaded is True  # type: ignore[attr-defined]
    finally:
        service.close()
