"""Namespace isolation: nothing from one namespace is ever visible from, or changed through,
another.

Five namespaces hold deliberately overlapping content: the same episodic texts, the same entity
names, the same subject/predicate facts with different objects (one superseded, one
contradicted in each), the same procedure names with different steps, old and new timestamps.
Then 10,000 sampled recall / reflect / stats calls with random filters (types, entities,
time_range, include_stale, include_invalidated, as_of, limit, explain) run through the
in-process MemoryService, plus a few hundred through a real MCP session. Every memory id in every
answer must belong to the namespace asked about; contradictions are only ever flagged against
facts of the same namespace; entity rows and links stay inside their namespace; stats counts
are exact per namespace; and forget / confirm / pin aimed at another namespace's id find
nothing and change nothing.
"""

from __future__ import annotations

import random
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.support.harness import ServiceFactory, call, mcp_client

from ferrex.core.service import MemoryService
from ferrex.server.calls import run_tool as invoke

NOW = datetime(2026, 4, 6, 12, 0, tzinfo=UTC)
NAMESPACES = ("alpha", "beta", "gamma", "delta.team", "eps_5")
SAMPLES = 10_000
MCP_SAMPLES = 300
ID = re.compile(r"^mem_[0-9a-f]{24}$")

SHARED_TEXTS = (
    "Deployed the billing service to production after the schema migration",
    "The on-call engineer restarted the ingestion workers at midnight",
    "Latency on the search API doubled during the Tuesday incident",
    "We agreed to keep PostgreSQL as the primary store for invoices",
    "The design review rejected the proposal to shard the user table",
    "Customer Acme asked for an export of their audit log",
)
ENTITY_NAMES = ("Acme", "PostgreSQL", "billing service", "search API", "Ada Lovelace")
QUERIES = (
    "billing deploy",
    "who owns the api server",
    "incident latency",
    "postgres invoices",
    "what port does the gateway use",
    "how do we release",
    "Acme audit log export",
    "ingestion workers restart",
    "shard the user table",
    "old notes from last year",
    "gateway",
    "release procedure steps",
)


@dataclass
class Truth:
    """What was stored where, straight from store's answers."""

    owner: dict[str, str] = field(default_factory=dict)  # memory id -> namespace
    types: dict[str, Counter[str]] = field(default_factory=dict)
    superseded: dict[str, int] = field(default_factory=dict)

    def add(self, namespace: str, reply: dict[str, Any], memory_type: str) -> None:
        assert reply["status"] != "duplicate", reply
        self.owner[reply["id"]] = namespace
        self.types.setdefault(namespace, Counter())[memory_type] += 1
        self.superseded[namespace] = self.superseded.get(namespace, 0) + len(
            reply.get("superseded", [])
        )


def populate(service: MemoryService, truth: Truth) -> None:
    for position, namespace in enumerate(NAMESPACES):
        ages = (1, 10, 40, 100, 200, 400)
        for index, (age, text) in enumerate(zip(ages, SHARED_TEXTS, strict=True)):
            when = (NOW - timedelta(days=age)).isoformat()
            reply = invoke(
                service,
                "store",
                {
                    "content": text,
                    "namespace": namespace,
                    "timestamp": when,
                    "entities": list(ENTITY_NAMES[: 1 + index % 5]),
                },
            )
            truth.add(namespace, reply, "episodic")
        own = f"Namespace {namespace} keeps its own notebook about topic number {position}"
        truth.add(
            namespace,
            invoke(service, "store", {"content": own, "namespace": namespace}),
            "episodic",
        )
        facts = [
            ("api server", "owned by", f"team {namespace}", 0.9),
            ("api server", "owned by", f"squad {position} of {namespace}", 0.9),  # supersedes
            ("gateway", "listens on port", str(8000 + position), 0.9),
            ("gateway", "listens on port", str(9100 + position), 0.4),  # contradiction
        ]
        for subject, predicate, obj, confidence in facts:
            reply = invoke(
                service,
                "store",
                {
                    "subject": subject,
                    "predicate": predicate,
                    "object": obj,
                    "confidence": confidence,
                    "namespace": namespace,
                },
            )
            truth.add(namespace, reply, "semantic")
        for version in (1, 2):
            steps = [f"{namespace} step {i} of release v{version}" for i in range(1, 4)]
            reply = invoke(
                service,
                "store",
                {"type": "procedural", "name": "release", "steps": steps, "namespace": namespace},
            )
            truth.add(namespace, reply, "procedural")


# =========================================================================== sampled requests


def random_recall(rng: random.Random, namespace: str) -> dict[str, Any]:
    args: dict[str, Any] = {"query": rng.choice(QUERIES), "namespace": namespace}
    if rng.random() < 0.3:
        args["types"] = rng.sample(["episodic", "semantic", "procedural"], rng.randint(1, 3))
    if rng.random() < 0.25:
        args["entities"] = rng.sample(ENTITY_NAMES, rng.randint(1, 2))
    if rng.random() < 0.25:
        start = NOW - timedelta(days=rng.randint(0, 500))
        args["time_range"] = {
            "after": start.isoformat(),
            "before": (start + timedelta(days=rng.randint(1, 300))).isoformat(),
        }
    for flag in ("include_stale", "include_invalidated", "explain"):
        if rng.random() < 0.3:
            args[flag] = rng.random() < 0.5
    if rng.random() < 0.1:
        args["as_of"] = (NOW - timedelta(days=rng.randint(0, 30))).isoformat()
    if rng.random() < 0.5:
        args["limit"] = rng.randint(1, 40)
    return args


def random_reflect(rng: random.Random, namespace: str) -> dict[str, Any]:
    return {
        "namespace": namespace,
        "limit": rng.randint(1, 50),
        "include_contradictions": rng.random() < 0.8,
        "include_stale": rng.random() < 0.8,
    }


def memory_ids_in(value: Any) -> Iterator[str]:
    """Every memory id anywhere in an answer (results, contradictions, recent, candidates...)."""
    if isinstance(value, str):
        if ID.match(value):
            yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from memory_ids_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from memory_ids_in(item)


def assert_only_own(answer: dict[str, Any], namespace: str, truth: Truth, what: str) -> int:
    ids = list(memory_ids_in(answer))
    strangers = [i for i in ids if truth.owner.get(i) != namespace]
    assert not strangers, f"{what} in {namespace} returned {strangers}"
    return len(ids)


def check_recall(answer: dict[str, Any], args: dict[str, Any]) -> None:
    """The filters themselves hold too (a broken filter could hide a namespace leak)."""
    # Past the limit only the other side of a flagged contradiction (spec Layer 4).
    ranked = [r for r in answer["results"] if not r.get("contradiction")]
    assert len(ranked) <= args.get("limit", 10)
    wanted = set(args.get("types") or ["episodic", "semantic", "procedural"])
    for item in answer["results"]:
        assert item["type"] in wanted
        if not args.get("include_stale"):
            assert item["freshness"]["staleness"] != "stale"
        history = "as_of" in args or "time_range" in args  # facts valid then, superseded since
        if not args.get("include_invalidated") and not history:
            assert "t_invalid" not in item


def check_stats(answer: dict[str, Any], namespace: str, truth: Truth, detailed: bool) -> None:
    counts = truth.types[namespace]
    assert answer["total"] == sum(counts.values())
    if detailed:
        assert answer["namespace"] == namespace
        assert answer["counts"] == {t: counts[t] for t in ("episodic", "semantic", "procedural")}
        assert answer["entities"] == len(ENTITY_NAMES) + 2  # + "api server" and "gateway"
        assert answer["superseded"] == truth.superseded[namespace] + 1  # + release v1
        assert answer["conflicts"] == 1


def sample_once(
    service: MemoryService, rng: random.Random, truth: Truth, seen: Counter[str]
) -> None:
    namespace = rng.choice(NAMESPACES)
    roll = rng.random()
    if roll < 0.8:
        args = random_recall(rng, namespace)
        answer = invoke(service, "recall", args)
        check_recall(answer, args)
        seen["recall ids"] += assert_only_own(answer, namespace, truth, f"recall {args}")
        seen["contradiction flags"] += sum(1 for r in answer["results"] if r.get("contradiction"))
        seen["recall"] += 1
    elif roll < 0.9:
        answer = invoke(service, "reflect", random_reflect(rng, namespace))
        seen["reflect ids"] += assert_only_own(answer, namespace, truth, "reflect")
        seen["reflect"] += 1
    else:
        detailed = rng.random() < 0.5
        answer = invoke(service, "stats", {"namespace": namespace, "detailed": detailed})
        check_stats(answer, namespace, truth, detailed)
        assert_only_own(answer, namespace, truth, "stats")
        seen["stats"] += 1


# =========================================================================== SQLite-level checks


def assert_entities_stay_home(db_path: Path) -> None:
    with closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as conn:
        per_namespace = dict(
            conn.execute("SELECT namespace, COUNT(*) FROM entities GROUP BY namespace").fetchall()
        )
        crossing_links = conn.execute(
            "SELECT COUNT(*) FROM memory_entities me JOIN memories m ON m.id = me.memory_id "
            "JOIN entities e ON e.id = me.entity_id WHERE e.namespace != m.namespace"
        ).fetchone()[0]
        crossing_subjects = conn.execute(
            "SELECT COUNT(*) FROM memories m JOIN entities e ON e.id = m.subject_entity_id "
            "WHERE e.namespace != m.namespace"
        ).fetchone()[0]
        crossing_supersede = conn.execute(
            "SELECT COUNT(*) FROM memories a JOIN memories b ON b.id = a.superseded_by "
            "WHERE a.namespace != b.namespace"
        ).fetchone()[0]
    assert per_namespace == {ns: len(ENTITY_NAMES) + 2 for ns in NAMESPACES}
    assert crossing_links == crossing_subjects == crossing_supersede == 0


def assert_cross_namespace_writes_find_nothing(service: MemoryService, truth: Truth) -> None:
    """forget / confirm / pin with another namespace's ids: not found, nothing changes."""
    for namespace in NAMESPACES:
        foreign = sorted(i for i, ns in truth.owner.items() if ns != namespace)[:25]
        before = service.meta.get_memories(foreign)
        forgot = invoke(service, "forget", {"ids": foreign, "namespace": namespace})
        assert forgot["deleted"] == [] and sorted(forgot["not_found"]) == foreign
        reflected = invoke(
            service,
            "reflect",
            {"namespace": namespace, "confirm_ids": foreign[:5], "pin_ids": foreign[5:10]},
        )
        assert reflected.get("confirmed", []) == [] and reflected.get("pinned", []) == []
        assert sorted(reflected["not_found"]) == sorted(foreign[:10])
        after = service.meta.get_memories(foreign)
        assert after == before


# =========================================================================== the tests


@pytest.fixture
def populated(make_service: ServiceFactory, tmp_path: Path) -> tuple[MemoryService, Truth, Path]:
    data_dir = tmp_path / "iso"
    service = make_service(data_dir, clock=lambda: NOW)
    truth = Truth()
    populate(service, truth)
    return service, truth, data_dir


def test_ten_thousand_sampled_reads_never_cross_a_namespace(
    populated: tuple[MemoryService, Truth, Path],
) -> None:
    service, truth, data_dir = populated
    rng = random.Random(7)
    seen: Counter[str] = Counter()
    started = time.monotonic()
    for _ in range(SAMPLES):
        sample_once(service, rng, truth, seen)
    elapsed = time.monotonic() - started
    assert sum(seen[k] for k in ("recall", "reflect", "stats")) == SAMPLES
    # The sample really exercised the overlap: many ids returned, contradictions flagged.
    assert seen["recall ids"] > 10 * seen["recall"] // 4 and seen["contradiction flags"] > 0
    assert seen["reflect ids"] > 0
    assert_entities_stay_home(data_dir / "ferrex.db")
    assert_cross_namespace_writes_find_nothing(service, truth)
    print(f"\nisolation: {dict(seen)} in {elapsed:.1f}s")


def test_contradictions_are_flagged_only_within_a_namespace(
    populated: tuple[MemoryService, Truth, Path],
) -> None:
    service, truth, _ = populated
    for namespace in NAMESPACES:
        answer = invoke(
            service,
            "recall",
            {"query": "what port does the gateway use", "namespace": namespace, "limit": 5},
        )
        flagged = [r for r in answer["results"] if r.get("contradiction")]
        assert len(flagged) == 2, answer["results"]  # the two gateway ports of this namespace
        for item in flagged:
            assert {truth.owner[i] for i in item["contradicts"]} == {namespace}
        reflected = invoke(
            service, "reflect", {"namespace": namespace, "include_contradictions": True}
        )
        assert_only_own(reflected, namespace, truth, "reflect")
        assert len(reflected["contradictions"]) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_isolation_holds_through_the_mcp_server(
    populated: tuple[MemoryService, Truth, Path], models_dir: Path, anyio_backend: str
) -> None:
    service, truth, data_dir = populated
    service.close()  # the server must own the data dir
    rng = random.Random(11)
    async with mcp_client(data_dir, models_dir, FERREX_LOG="error") as client:
        await call(client, "recall", {"query": "warm up"})  # ready: start-up upkeep has run
        # The server runs on the real clock, so its start-up retention sweep may already have
        # evicted facts superseded long before today: count what SQLite holds now.
        with closing(sqlite3.connect(f"file:{data_dir / 'ferrex.db'}?mode=ro", uri=True)) as db:
            totals = dict(db.execute("SELECT namespace, COUNT(*) FROM memories GROUP BY 1"))
        for _ in range(MCP_SAMPLES):
            namespace = rng.choice(NAMESPACES)
            if rng.random() < 0.85:
                args = random_recall(rng, namespace)
                answer = await call(client, "recall", args)
                assert "error" not in answer, answer
                assert_only_own(answer, namespace, truth, "recall over MCP")
            else:
                answer = await call(client, "stats", {"namespace": namespace, "detailed": True})
                assert answer["total"] == totals[namespace]
                assert_only_own(answer, namespace, truth, "stats over MCP")
