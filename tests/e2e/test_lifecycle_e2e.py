"""Memory lifecycle end to end through MCP (a real ``ferrex`` subprocess over stdio).

Proves, as an agent sees it: an episode's past ``timestamp`` dates the event but does not age
the memory (stored today, it is fresh); artificially aged memories (past creation times written
into ``<data dir>/ferrex.db`` between server runs) move fresh -> aging -> stale;
stale ones are held back by default with a ``stale_held_back`` count and come back with
``include_stale=true``; superseded facts are marked "superseded"; ``--staleness-config``
thresholds apply per namespace; recall bumps access but only a reflect confirmation validates;
brief and detailed stats have the spec's shapes; forget with cascade removes the memory and its
only-used entity and reports unknown ids; the recall cache is hit on a repeat and invalidated by
store and forget; a small ``[lifecycle] max_memories`` budget evicts in the spec's order and the
store that triggered an eviction says so.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from tests.support.harness import call, mcp_client, ok
from tests.support.spec import SPEC_DETAILED_KEYS, SPEC_TOML

from ferrex.core.clock import parse_timestamp, to_iso
from ferrex.embed.embedder import FastEmbedEmbedder

pytestmark = pytest.mark.anyio

DEPLOY_STEPS = ["build the image", "push it to the registry", "apply the helm chart"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def days_ago(days: float) -> str:
    return to_iso(datetime.now(UTC) - timedelta(days=days))


def backdate(data: Path, memory_id: str, **columns: float) -> None:
    """Write past times (days ago) into the stopped server's SQLite file."""
    assignments = ", ".join(f"{name} = ?" for name in columns)
    with sqlite3.connect(data / "ferrex.db") as db:
        cursor = db.execute(
            f"UPDATE memories SET {assignments} WHERE id = ?",
            [*(days_ago(days) for days in columns.values()), memory_id],
        )
        assert cursor.rowcount == 1
    db.close()


async def levels(client: Client, query: str, **extra: Any) -> dict[str, str]:
    found = await ok(client, "recall", {"query": query, "limit": 20, **extra})
    return {r["id"]: r["freshness"]["staleness"] for r in found["results"]}


async def store(client: Client, **arguments: Any) -> str:
    result = await ok(client, "store", arguments)
    return str(result["id"])


async def seed_aging_store(client: Client) -> dict[str, str]:
    ids = {
        "e10": await store(
            client,
            content="the incident review for the checkout outage was held with the payments team",
            timestamp=days_ago(10),
        ),
        "e45": await store(
            client,
            content="the payments team rewrote the checkout retry logic after the outage",
            timestamp=days_ago(45),
        ),
        "e120": await store(
            client,
            content="an early checkout outage was caused by an expired payments certificate",
            timestamp=days_ago(120),
        ),
        "old_fact": await store(
            client, subject="checkout", predicate="uses", object="stripe api 2022-11"
        ),
        "fact": await store(
            client, subject="checkout", predicate="uses", object="stripe api 2024-06"
        ),
        "ci_deploy": await store(
            client,
            type="procedural",
            name="deploy-runner",
            steps=DEPLOY_STEPS,
            namespace="ci-infra",
        ),
        "deploy": await store(client, type="procedural", name="deploy-runner", steps=DEPLOY_STEPS),
    }
    return ids


async def test_aged_memories_move_from_fresh_to_aging_to_stale(
    tmp_path: Path, models_dir: Path
) -> None:
    data = tmp_path / "d"
    config = tmp_path / "staleness.toml"
    config.write_text(SPEC_TOML, encoding="utf-8")
    outage = "checkout outage payments"
    async with mcp_client(data, models_dir, "--staleness-config", str(config)) as client:
        ids = await seed_aging_store(client)
        # Events 10, 45 and 120 days old, all recorded today: three fresh memories.
        default = await ok(client, "recall", {"query": outage, "types": ["episodic"]})
        assert {r["id"]: r["freshness"]["staleness"] for r in default["results"]} == {
            ids["e10"]: "fresh",
            ids["e45"]: "fresh",
            ids["e120"]: "fresh",
        }
        event_days = {
            r["id"]: round((datetime.now(UTC) - parse_timestamp(r["timestamp"])).days)
            for r in default["results"]
        }  # the timestamps still date the events
        assert event_days == {ids["e10"]: 10, ids["e45"]: 45, ids["e120"]: 120}
        assert default.get("stale_held_back", 0) == 0

    # Recorded when they happened: age the memories while the server is stopped.
    for name, days in (("e10", 10), ("e45", 45), ("e120", 120)):
        backdate(data, ids[name], created_at=days, updated_at=days)

    async with mcp_client(data, models_dir, "--staleness-config", str(config)) as client:
        default = await ok(client, "recall", {"query": outage, "types": ["episodic"]})
        assert {r["id"]: r["freshness"]["staleness"] for r in default["results"]} == {
            ids["e10"]: "fresh",
            ids["e45"]: "aging",
        }
        assert default.get("stale_held_back", 0) == 1
        everything = await levels(client, outage, types=["episodic"], include_stale=True)
        assert everything[ids["e120"]] == "stale"
        facts = await levels(
            client, "what does checkout use", types=["semantic"], include_invalidated=True
        )
        assert facts == {ids["fact"]: "fresh", ids["old_fact"]: "superseded"}
        stats = await ok(client, "stats", {})
        assert stats["needs_attention"]["stale_count"] == 1

    # Age everything while the server is stopped.
    backdate(data, ids["e10"], created_at=50, updated_at=50)
    backdate(data, ids["e45"], created_at=100, updated_at=100)
    backdate(data, ids["fact"], created_at=100, updated_at=100)
    for name in ("ci_deploy", "deploy"):
        backdate(data, ids[name], created_at=10, updated_at=10)

    async with mcp_client(data, models_dir, "--staleness-config", str(config)) as client:
        default = await ok(client, "recall", {"query": outage, "types": ["episodic"]})
        assert [r["id"] for r in default["results"]] == [ids["e10"]]
        assert default["results"][0]["freshness"]["staleness"] == "aging"
        assert default["results"][0]["freshness"]["age_days"] == 50
        assert default.get("stale_held_back", 0) == 2
        everything = await levels(client, outage, types=["episodic"], include_stale=True)
        assert everything == {ids["e10"]: "aging", ids["e45"]: "stale", ids["e120"]: "stale"}

        facts = await ok(
            client, "recall", {"query": "what does checkout use", "types": ["semantic"]}
        )
        [fact] = facts["results"]
        assert fact["id"] == ids["fact"]
        assert fact["freshness"]["staleness"] == "aging"
        assert fact["freshness"]["access_count"] >= 1  # recalled during the first run...
        assert fact["freshness"]["last_validated"] is None  # ...which never validates
        confirmed = await ok(client, "reflect", {"confirm_ids": [ids["fact"]]})
        assert confirmed["confirmed"] == [ids["fact"]]
        facts = await ok(
            client, "recall", {"query": "what does checkout use", "types": ["semantic"]}
        )
        assert facts["results"][0]["freshness"]["staleness"] == "fresh"
        assert facts["results"][0]["freshness"]["last_validated"] is not None

        runner = {"query": "deploy the runner", "types": ["procedural"]}
        ci = await ok(client, "recall", {**runner, "namespace": "ci-infra"})
        assert [(r["id"], r["freshness"]["staleness"]) for r in ci["results"]] == [
            (ids["ci_deploy"], "aging")  # 10 days: past the 7-day override
        ]
        plain = await ok(client, "recall", runner)
        assert [(r["id"], r["freshness"]["staleness"]) for r in plain["results"]] == [
            (ids["deploy"], "fresh")
        ]


SPEC_BRIEF_KEYS = {"total", "recent", "needs_attention"}


async def recall_explained(client: Client, query: str) -> dict[str, Any]:
    return await ok(client, "recall", {"query": query, "limit": 10, "explain": True})


async def test_stats_forget_cascade_and_cache_through_mcp(
    tmp_path: Path, models_dir: Path, embedder: FastEmbedEmbedder
) -> None:
    async with mcp_client(tmp_path / "d", models_dir) as client:
        shared = await store(
            client,
            content="the grafana dashboards show the kafka consumer lag",
            entities=["grafana", "kafka"],
        )
        only = await store(
            client,
            content="loki keeps thirty days of kafka broker logs",
            entities=["loki", "kafka"],
        )
        await store(client, subject="kafka", predicate="version", object="3.6")
        await store(client, subject="kafka", predicate="version", object="3.7", confidence=0.5)

        brief = await ok(client, "stats", {})
        # The spec's keys; plus short "warnings" while running degraded (here: offline, no
        # reranker), which the agent must be told about (issue 3).
        assert set(brief) - {"warnings"} == SPEC_BRIEF_KEYS
        assert all(isinstance(w, str) and len(w) < 100 for w in brief.get("warnings", []))
        assert embedder.count_tokens(json.dumps(brief)) < 300
        assert brief["total"] == 4
        assert brief["needs_attention"] == {
            "stale_count": 0,
            "conflict_count": 1,
            "unvalidated_count": 0,
        }
        detailed = await ok(client, "stats", {"detailed": True})
        assert set(detailed) >= SPEC_DETAILED_KEYS
        assert detailed["counts"] == {"episodic": 2, "semantic": 2, "procedural": 0}
        assert detailed["staleness"] == {"fresh": 4, "aging": 0, "stale": 0}
        assert detailed["entities"] == 3  # grafana, kafka, loki
        assert detailed["storage_mb"] > 0

        query = "kafka logs and consumer lag"
        first = await recall_explained(client, query)
        assert first["explain"]["cache_hit"] is False
        again = await recall_explained(client, query)
        assert again["explain"]["cache_hit"] is True
        assert again["results"] and [r["id"] for r in again["results"]] == [
            r["id"] for r in first["results"]
        ]
        new = await store(
            client,
            content="the kafka consumer lag alert now pages after 5 minutes",
            entities=["kafka"],
        )
        after_store = await recall_explained(client, query)
        assert after_store["explain"]["cache_hit"] is False
        assert new in [r["id"] for r in after_store["results"]]

        forgotten = await ok(
            client, "forget", {"ids": [only, "mem_000000000000deadbeef"], "cascade": True}
        )
        assert forgotten["deleted"] == [only]
        assert forgotten["not_found"] == ["mem_000000000000deadbeef"]
        assert forgotten["entities_removed"] == ["loki"]
        after_forget = await recall_explained(client, query)
        assert after_forget["explain"]["cache_hit"] is False
        assert only not in [r["id"] for r in after_forget["results"]]
        assert shared in [r["id"] for r in after_forget["results"]]
        gone = await ok(client, "recall", {"query": "loki logs", "entities": ["loki"]})
        assert gone["results"] == [] and gone["unresolved_entities"] == ["loki"]
        final = await ok(client, "stats", {"detailed": True})
        assert final["total"] == 4 and final["entities"] == 2
        assert final["cache"]["hits"] >= 1


async def test_small_budget_evicts_in_priority_order(tmp_path: Path, models_dir: Path) -> None:
    data = tmp_path / "d"
    data.mkdir()
    async with mcp_client(data, models_dir) as client:
        oldest = await store(client, content="the first office opened above a bakery")
        stale = await store(client, content="the intranet moved from Confluence to Notion")
    # Recorded 200 and 120 days ago; then a budget of five memories.
    backdate(data, oldest, created_at=200, updated_at=200)
    backdate(data, stale, created_at=120, updated_at=120)
    (data / "ferrex.toml").write_text("[lifecycle]\nmax_memories = 5\n", encoding="utf-8")
    async with mcp_client(data, models_dir) as client:
        expired = await store(
            client,
            subject="intranet",
            predicate="hosted_on",
            object="a rack server",
            timestamp=days_ago(400),
        )
        procedure = await store(
            client,
            type="procedural",
            name="onboard-hire",
            steps=["create accounts", "ship the laptop"],
        )
        current = await store(
            client,
            subject="intranet",
            predicate="hosted_on",
            object="notion cloud",
            timestamp=days_ago(200),
        )
        fresh, answers = [], []
        for text in (
            "Mina joined the design team",
            "the espresso machine was fixed",
            "the all-hands moved to Thursdays",
            "the VPN client was updated",
        ):
            answer = await ok(client, "store", {"content": text})
            fresh.append(answer["id"])
            answers.append(answer.get("evicted", 0))
        # The sixth and seventh memories each pushed one stale episode out, and said so.
        assert answers == [1, 1, 0, 0]
        stats = await ok(client, "stats", {"detailed": True})
        # The two stale episodes go, oldest first. The superseded fact stays: its retention
        # window counts from when it was superseded (today), however old its validity is, and
        # within the window it is history, not evictable. Nothing else may go (an active fact,
        # a procedure, fresh episodes), so the store stays over budget.
        assert stats["evictions"]["total"] == 2
        assert stats["total"] == 7
        everything = await levels(
            client,
            "office intranet onboarding design espresso VPN",
            include_stale=True,
            include_invalidated=True,
        )
        assert set(everything) == {expired, procedure, current, *fresh}
        failed = await call(client, "forget", {"ids": [oldest]})
        assert failed["not_found"] == [oldest]
    with sqlite3.connect(data / "ferrex.db") as db:
        rows = db.execute(
            "SELECT memory_id, json_extract(detail, '$.reason') FROM audit "
            "WHERE action = 'evict' ORDER BY seq"
        ).fetchall()
    db.close()
    assert [memory_id for memory_id, _ in rows] == [oldest, stale]
    assert rows[0][1] == rows[1][1] == "stale episodic"
