"""Memory semantics end to end: a real ``ferrex`` subprocess driven through the MCP SDK client.

Two server spawns. The first proves the fact rules as an agent sees them: ("X", "uses", "v1") then
("X", "depends-on", "v2") invalidates the first (include_invalidated returns both, the old one
"superseded"; without it only v2), as_of, near-duplicate rewording rejected with the existing id
and similarity, supersedes (unknown id -> clear error, nothing written), lower-confidence
contradictions flagged on recall, multi-valued predicates from ``ferrex.toml`` and from the flag,
"the more recent wins", duplicate facts confirming the old one, per-namespace synonyms from
``ferrex.toml`` and namespaces never contradicting each other; afterwards the audit log holds every
transition. The second proves entities ("Tokio" / "tokio runtime" / "tokio", fuzzy and embedding
aliases, alias candidates in reflect), chunking (episodic too long rejected, a long procedure split
one point per step and recalled once) and procedure versions with rollback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from tests.support.harness import call, mcp_client, ok
from tests.support.vocabulary import SUBSYSTEMS

from ferrex.core.clock import parse_timestamp
from ferrex.core.ids import point_id
from ferrex.store.edge import EdgeIndex
from ferrex.store.sqlite import SqliteStore

pytestmark = pytest.mark.anyio

CONFIG = """
[conflict]
multi_valued_predicates = ["has_contributor"]

[predicates.namespaces.infra.synonyms]
depends_on = ["links_against"]
"""
JAN = "2026-01-15T00:00:00Z"
FEB = "2026-02-01T00:00:00Z"
MAR = "2026-03-01T00:00:00Z"
APR = "2026-04-01T00:00:00Z"
ORIGINAL = "user debugged a deadlock in the connection pool by switching to tokio::sync::Semaphore"
REWORDED = "the user fixed a deadlock in the connection pool by switching to tokio::sync::Semaphore"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def fact(subject: str, predicate: str, obj: str, **extra: Any) -> dict[str, Any]:
    return {"subject": subject, "predicate": predicate, "object": obj, **extra}


async def recall(client: Client, query: str, **extra: Any) -> dict[str, dict[str, Any]]:
    found = await ok(client, "recall", {"query": query, "limit": 20, **extra})
    return {r["id"]: r for r in found["results"]}


async def total(client: Client, namespace: str = "default") -> tuple[int, int]:
    stats = await ok(client, "stats", {"detailed": True, "namespace": namespace})
    return stats["total"], stats["entities"]


# --------------------------------------------------------------------------- facts


async def check_supersede_and_history(client: Client) -> dict[str, str]:
    v1 = await ok(client, "store", fact("X", "uses", "v1", t_valid=JAN))
    v2 = await ok(client, "store", fact("X", "depends-on", "v2", t_valid=APR))
    assert v2["status"] == "superseded" and v2["superseded"] == [v1["id"]]
    history = await recall(client, "what does X depend on", include_invalidated=True)
    assert set(history) >= {v1["id"], v2["id"]}
    old = history[v1["id"]]
    assert parse_timestamp(old["t_invalid"]) == parse_timestamp(APR)
    assert old["superseded_by"] == v2["id"]
    assert old["freshness"]["staleness"] == "superseded"
    assert history[v2["id"]]["freshness"]["staleness"] == "fresh"
    current = await recall(client, "what does X depend on")
    assert v1["id"] not in current and v2["id"] in current
    assert set(await recall(client, "X uses", as_of=MAR, types=["semantic"])) == {v1["id"]}
    assert set(await recall(client, "X uses", as_of=APR, types=["semantic"])) == {v2["id"]}
    return {"v1": v1["id"], "v2": v2["id"]}


async def check_dedup_and_supersedes(client: Client) -> dict[str, str]:
    original = await ok(client, "store", {"content": ORIGINAL})
    before = await total(client)
    duplicate = await call(client, "store", {"content": REWORDED, "entities": ["fresh-entity"]})
    assert duplicate["error"]["code"] == "duplicate"
    assert duplicate["error"]["existing_id"] == original["id"]
    assert duplicate["error"]["similarity"] > 0.95
    unknown = await call(client, "store", {"content": REWORDED, "supersedes": "mem_0000000000"})
    assert (
        unknown["error"]["code"] == "not_found" and "mem_0000000000" in unknown["error"]["message"]
    )
    assert await total(client) == before
    replacement = await ok(client, "store", {"content": REWORDED, "supersedes": original["id"]})
    assert replacement["superseded"] == [original["id"]]
    found = await recall(client, "connection pool deadlock")
    assert replacement["id"] in found and original["id"] not in found
    return {"original": original["id"], "replacement": replacement["id"]}


async def check_contradiction(client: Client) -> dict[str, str]:
    strong = await ok(client, "store", fact("api-server", "uses", "tokio 1.38", confidence=0.95))
    weak = await ok(client, "store", fact("api-server", "requires", "tokio 1.40", confidence=0.5))
    assert weak["status"] == "contradiction" and weak["contradicts"] == [strong["id"]]
    found = await recall(client, "api-server tokio version", types=["semantic"])
    assert found[strong["id"]]["contradiction"] is True
    assert found[strong["id"]]["contradicts"] == [weak["id"]]
    assert found[weak["id"]]["contradicts"] == [strong["id"]]
    reflect = await ok(client, "reflect", {})
    assert [{f["id"] for f in g["facts"]} for g in reflect["contradictions"]] == [
        {strong["id"], weak["id"]}
    ]
    return {"weak": weak["id"]}


async def check_multi_valued(client: Client) -> None:
    alice = await ok(client, "store", fact("ferrex", "has_contributor", "alice"))
    bob = await ok(client, "store", fact("ferrex", "has-contributor", "bob"))
    assert bob["multi_valued"] is True and bob["also_current"] == [alice["id"]]
    serde = await ok(client, "store", fact("ferrex", "uses", "serde"))
    tokio = await ok(client, "store", fact("ferrex", "uses", "tokio", multi_valued=True))
    assert tokio["status"] == "stored" and tokio["also_current"] == [serde["id"]]
    found = await recall(
        client, "ferrex contributors and libraries", types=["semantic"], explain=True
    )
    for memory_id in (alice["id"], bob["id"], serde["id"], tokio["id"]):
        assert "t_invalid" not in found[memory_id]
        assert found[memory_id]["explain"]["multi_valued"] is True
        assert "contradiction" not in found[memory_id]


async def check_dates_and_duplicates(client: Client) -> None:
    current = await ok(client, "store", fact("billing", "version", "3.2", t_valid=MAR))
    older = await ok(client, "store", fact("billing", "runs_version", "3.1", t_valid=FEB))
    assert older["status"] == "historical" and older["superseded_by"] == current["id"]
    newer = await ok(client, "store", fact("billing", "at-version", "3.3", t_valid=APR))
    assert newer["superseded"] == [current["id"]]
    again = await ok(client, "store", fact("billing", "version", "3.3", confidence=0.7))
    assert again["status"] == "duplicate" and again["id"] == newer["id"]
    assert "confirmed" in again["message"]


async def check_namespaces_and_synonyms(client: Client) -> None:
    infra_old = await ok(client, "store", fact("libfoo", "uses", "openssl 1.1", namespace="infra"))
    infra_new = await ok(
        client, "store", fact("libfoo", "links_against", "openssl 3.0", namespace="infra")
    )
    assert infra_new["superseded"] == [infra_old["id"]]
    other = await ok(client, "store", fact("libfoo", "links_against", "openssl 3.0"))
    assert other["status"] == "stored" and "superseded" not in other
    # Same subject and predicate as a "default" fact, other value, other namespace: no conflict.
    lone = await ok(
        client, "store", fact("api-server", "uses", "async-std", namespace="infra", confidence=0.1)
    )
    assert lone["status"] == "stored"
    found = await recall(client, "api-server runtime", namespace="infra")
    assert "contradiction" not in found[lone["id"]]


def check_audit_log(data: Path, ids: dict[str, str]) -> None:
    meta = SqliteStore(data / "ferrex.db")
    try:
        supersedes = {
            (e["memory_id"], e["other_id"], e["detail"]["reason"])
            for e in meta.audit_entries("default", "supersede", limit=100)
        }
        assert (ids["v1"], ids["v2"], "superseded") in supersedes
        assert (ids["original"], ids["replacement"], "explicit") in supersedes
        for action in ("contradiction", "multi_valued", "historical", "duplicate", "store"):
            assert meta.audit_entries("default", action), action
        assert meta.audit_entries("default", "contradiction")[0]["memory_id"] == ids["weak"]
        assert meta.audit_entries("infra", "supersede")
    finally:
        meta.close()


async def test_fact_semantics_through_mcp(tmp_path: Path, models_dir: Path) -> None:
    data = tmp_path / "facts"
    data.mkdir()
    (data / "ferrex.toml").write_text(CONFIG)
    ids: dict[str, str] = {}
    async with mcp_client(data, models_dir) as client:
        ids.update(await check_supersede_and_history(client))
        ids.update(await check_dedup_and_supersedes(client))
        ids.update(await check_contradiction(client))
        await check_multi_valued(client)
        await check_dates_and_duplicates(client)
        await check_namespaces_and_synonyms(client)
    check_audit_log(data, ids)


# --------------------------------------------------------------------------- entities, chunks


async def check_entities(client: Client) -> None:
    capital = await ok(
        client, "store", {"content": "moved the pool to a Tokio semaphore", "entities": ["Tokio"]}
    )
    runtime = await ok(
        client,
        "store",
        {"content": "upgraded the async executor of the api", "entities": ["tokio runtime"]},
    )
    await ok(client, "store", {"content": "lunch order for the offsite", "entities": ["catering"]})
    for name in ("tokio", "TOKIO runtime"):
        found = await recall(client, "tokio", entities=[name])
        assert set(found) == {capital["id"], runtime["id"]}, name
    postgres = await ok(client, "store", {"content": "db migration done", "entities": ["postgres"]})
    sql = await ok(client, "store", {"content": "vacuum schedule set", "entities": ["PostgreSQL"]})
    assert set(await recall(client, "database", entities=["postgres"])) == {
        postgres["id"],
        sql["id"],
    }
    pipeline = await ok(
        client, "store", {"content": "pipeline runs on merge", "entities": ["deployment pipeline"]}
    )
    alias = await ok(
        client,
        "store",
        {"content": "nightly cache rebuild", "entities": ["pipeline for deployment"]},
    )
    # Resolved to the same entity (by embedding): each name finds both memories.
    for name in ("deployment pipeline", "pipeline for deployment"):
        assert set(await recall(client, "pipeline", entities=[name])) == {
            pipeline["id"],
            alias["id"],
        }, name
    await ok(client, "store", {"content": "the car needs new tyres", "entities": ["car"]})
    await ok(client, "store", {"content": "insurance renews in May", "entities": ["automobile"]})
    reflect = await ok(client, "reflect", {})
    assert [(c["name"], c["entity"]) for c in reflect["alias_candidates"]] == [
        ("automobile", "car")
    ]


async def check_chunking(client: Client) -> str:
    before = await total(client)
    too_long = await call(client, "store", {"content": " ".join(["word"] * 300)})
    assert too_long["error"]["code"] == "episodic_too_long"
    assert too_long["error"]["message"] == "Episodic memory too long. Break into separate events."
    assert await total(client) == before
    steps = [
        f"drain the {name} queue, snapshot its state to object storage, verify the checksum, "
        f"then restart the {name} workers one availability zone at a time"
        for name in SUBSYSTEMS
    ]
    stored = await ok(
        client, "store", {"type": "procedural", "name": "rotate-subsystems", "steps": steps}
    )
    found = await ok(
        client, "recall", {"query": "drain the geo lookup queue", "limit": 10, "explain": True}
    )
    matching = [r for r in found["results"] if r["id"] == stored["id"]]
    assert len(matching) == 1 and matching[0]["explain"]["steps"] == steps
    assert all(step in matching[0]["content"] for step in steps)
    return stored["id"]


async def check_versions(client: Client) -> None:
    v1 = ["build release", "push to registry", "apply k8s manifest"]
    v2 = ["build release", "run the integration tests", "push to registry", "apply k8s manifest"]
    base = {"type": "procedural", "name": "deploy-to-staging", "conditions": ["branch is main"]}
    first = await ok(client, "store", {**base, "steps": v1})
    second = await ok(client, "store", {**base, "steps": v2})
    assert (first["version"], second["version"]) == (1, 2)
    query = {"query": "deploy to staging", "types": ["procedural"], "explain": True}

    async def versions(**extra: Any) -> list[tuple[str, int, list[str]]]:
        found = (await ok(client, "recall", {**query, **extra}))["results"]
        return [
            (r["id"], r["version"], r["explain"]["steps"])
            for r in found
            if r["explain"].get("name") == "deploy-to-staging"
        ]

    assert await versions() == [(second["id"], 2, v2)]
    assert await versions(version=1) == [(first["id"], 1, v1)]
    rolled = await ok(
        client, "store", {"type": "procedural", "name": "deploy-to-staging", "rollback_to": 1}
    )
    assert (rolled["version"], rolled["rolled_back_to"]) == (3, 1)
    assert await versions() == [(rolled["id"], 3, v1)]


async def test_entities_chunking_and_versions_through_mcp(tmp_path: Path, models_dir: Path) -> None:
    data = tmp_path / "entities"
    async with mcp_client(data, models_dir) as client:
        await check_entities(client)
        chunked = await check_chunking(client)
        await check_versions(client)
    index = EdgeIndex(data / "index")
    try:
        points = index.points_by_memory()
    finally:
        index.close()
    assert sorted(points[chunked]) == sorted(point_id(chunked, i) for i in range(len(SUBSYSTEMS)))
