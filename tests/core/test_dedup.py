"""Deduplication on write (spec store step 2, "Deduplication" unit tests).

Proves ``find_duplicate`` at its boundary (strictly above the threshold, the closest wins) and, on a
real MemoryService with the real MiniLM model: a near-duplicate rewording is rejected with code
``duplicate``, the existing id and the cosine; a cosine at or below the (configurable) threshold
stores; ``supersedes`` bypasses the check and invalidates the original; types and namespaces never
cross-deduplicate; items of one bulk batch deduplicate against each other; and a rejected store
changes nothing in SQLite (every table, every row) or in the vector index.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import numpy as np
import pytest
from tests.support.harness import ServiceFactory
from tests.support.typed import stored

from ferrex.core.errors import FerrexError
from ferrex.core.ingest.dedup import find_duplicate
from ferrex.core.ports import IndexHit
from ferrex.core.service import MemoryService
from ferrex.embed.embedder import FastEmbedEmbedder
from ferrex.server.calls import run_tool as invoke
from ferrex.server.calls import store_many

ORIGINAL = "user debugged a deadlock in the connection pool by switching to tokio::sync::Semaphore"
REWORDED = "the user fixed a deadlock in the connection pool by switching to tokio::sync::Semaphore"
DIFFERENT = "the nightly backup job failed because the disk on db-2 was full"


def cosine(embedder: FastEmbedEmbedder, a: str, b: str) -> float:
    va, vb = embedder.embed_documents([a, b])
    return float(np.dot(va, vb))


def hit(memory_id: str, score: float) -> IndexHit:
    return IndexHit(point_id=f"p-{memory_id}", memory_id=memory_id, score=score)


def snapshot(service: MemoryService) -> dict[str, Any]:
    """Every row of every SQLite table plus the index's points, for before/after comparisons."""
    connection = sqlite3.connect(service.settings.db_path)
    try:
        tables = [
            row[0]
            for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        rows = {
            table: sorted(map(repr, connection.execute(f"SELECT * FROM {table}")))
            for table in tables
        }
    finally:
        connection.close()
    return {"sqlite": rows, "index": service.index.points_by_memory()}


def rejected(service: MemoryService, arguments: dict[str, Any]) -> FerrexError:
    with pytest.raises(FerrexError) as error:
        invoke(service, "store", arguments)
    return error.value


# --------------------------------------------------------------------------- find_duplicate


def test_above_threshold_is_a_duplicate() -> None:
    found = find_duplicate([hit("mem_a", 0.9512345)], 0.95)
    assert found is not None and found.memory_id == "mem_a" and found.similarity == 0.9512


def test_at_or_below_threshold_is_not() -> None:
    assert find_duplicate([hit("mem_a", 0.95)], 0.95) is None
    assert find_duplicate([hit("mem_a", 0.7)], 0.95) is None
    assert find_duplicate([], 0.95) is None


def test_closest_hit_wins_and_ties_break_by_id() -> None:
    found = find_duplicate([hit("mem_b", 0.96), hit("mem_c", 0.99), hit("mem_a", 0.97)], 0.95)
    assert found is not None and found.memory_id == "mem_c"
    tie = find_duplicate([hit("mem_b", 0.98), hit("mem_a", 0.98)], 0.95)
    assert tie is not None and tie.memory_id == "mem_a"


# --------------------------------------------------------------------------- service


def test_rewording_is_rejected_with_the_existing_id(
    service: MemoryService, embedder: FastEmbedEmbedder
) -> None:
    measured = cosine(embedder, ORIGINAL, REWORDED)
    assert measured > 0.95
    original = invoke(service, "store", {"content": ORIGINAL})
    error = rejected(service, {"content": REWORDED})
    assert error.code == "duplicate"
    assert error.details["existing_id"] == original["id"]
    assert error.details["similarity"] == pytest.approx(measured, abs=2e-3)
    assert error.message.startswith(f"similar memory already exists: {original['id']}")


def test_threshold_is_configurable_and_strict(
    make_service: ServiceFactory, embedder: FastEmbedEmbedder
) -> None:
    measured = cosine(embedder, ORIGINAL, REWORDED)
    lenient = make_service(dedup={"threshold": round(measured + 0.002, 4)})
    invoke(lenient, "store", {"content": ORIGINAL})
    assert invoke(lenient, "store", {"content": REWORDED})["status"] == "stored"
    strict = make_service(dedup={"threshold": round(measured - 0.002, 4)})
    first = invoke(strict, "store", {"content": ORIGINAL})
    assert rejected(strict, {"content": REWORDED}).details["existing_id"] == first["id"]


def test_dissimilar_memory_is_stored(service: MemoryService) -> None:
    invoke(service, "store", {"content": ORIGINAL})
    assert invoke(service, "store", {"content": DIFFERENT})["status"] == "stored"
    assert service.meta.count_memories() == 2


def test_supersedes_bypasses_dedup_and_invalidates_the_original(service: MemoryService) -> None:
    original = invoke(service, "store", {"content": ORIGINAL})
    replacement = invoke(service, "store", {"content": REWORDED, "supersedes": original["id"]})
    assert replacement["status"] == "stored" and replacement["superseded"] == [original["id"]]
    old = service.meta.get_memory(original["id"])
    assert old.t_invalid is not None and old.superseded_by == replacement["id"]
    found = invoke(service, "recall", {"query": "connection pool deadlock semaphore"})["results"]
    assert [r["id"] for r in found] == [replacement["id"]]
    [entry] = service.meta.audit_entries("default", "supersede")
    assert (entry["memory_id"], entry["other_id"]) == (original["id"], replacement["id"])


def test_types_never_cross_deduplicate(service: MemoryService) -> None:
    episodic = invoke(service, "store", {"content": "api-server uses tokio 1.38"})
    semantic = invoke(
        service, "store", {"subject": "api-server", "predicate": "uses", "object": "tokio 1.38"}
    )
    procedural = invoke(
        service, "store", {"type": "procedural", "content": "api-server uses tokio 1.38"}
    )
    assert [episodic["type"], semantic["type"], procedural["type"]] == [
        "episodic",
        "semantic",
        "procedural",
    ]
    assert all(r["status"] == "stored" for r in (episodic, semantic, procedural))
    assert service.meta.count_memories() == 3


def test_each_type_deduplicates_within_itself(service: MemoryService) -> None:
    first = invoke(
        service,
        "store",
        {"type": "procedural", "content": "restart the worker then clear the cache"},
    )
    error = rejected(
        service, {"type": "procedural", "content": "restart the worker, then clear the cache"}
    )
    assert error.details["existing_id"] == first["id"]


def test_alike_facts_about_two_subjects_are_two_facts(service: MemoryService) -> None:
    """The triples' text is nearly identical (cosine > 0.95), but the subjects are two entities:
    both are stored, alone and in one batch, and neither supersedes the other."""
    runner = "vitest with jsdom environment and coverage via istanbul"
    frontend = invoke(
        service, "store", {"subject": "frontend", "predicate": "test runner", "object": runner}
    )
    backend = invoke(
        service, "store", {"subject": "backend", "predicate": "test runner", "object": runner}
    )
    assert backend["status"] == "stored", backend
    batch = store_many(
        service,
        [
            {"subject": "service-a", "predicate": "test runner", "object": runner},
            {"subject": "service-b", "predicate": "test runner", "object": runner},
        ],
    )
    assert [r["status"] for r in batch] == ["stored", "stored"], batch
    current = service.meta.memories_in_namespace(
        "default", where="type = 'semantic' AND t_invalid IS NULL"
    )
    assert {m.id for m in current} == {frontend["id"], backend["id"], *(r["id"] for r in batch)}
    # The same fact about the same subject is still a duplicate.
    again = invoke(
        service, "store", {"subject": "frontend", "predicate": "test runner", "object": runner}
    )
    assert again["status"] == "duplicate" and again["id"] == frontend["id"]


def test_namespaces_never_cross_deduplicate(service: MemoryService) -> None:
    invoke(service, "store", {"content": ORIGINAL, "namespace": "alpha"})
    other = invoke(service, "store", {"content": ORIGINAL, "namespace": "beta"})
    assert other["status"] == "stored"
    assert service.meta.get_memory(other["id"]).namespace == "beta"


def test_bulk_items_deduplicate_against_each_other(service: MemoryService) -> None:
    results = store_many(
        service, [{"content": ORIGINAL}, {"content": REWORDED}, {"content": DIFFERENT}]
    )
    assert results[0]["status"] == "stored" and results[2]["status"] == "stored"
    assert results[1]["error"]["code"] == "duplicate"
    assert results[1]["error"]["existing_id"] == results[0]["id"]
    assert service.meta.count_memories() == 2
    assert set(service.index.points_by_memory()) == {results[0]["id"], results[2]["id"]}


def test_rejected_store_changes_nothing(service: MemoryService) -> None:
    invoke(service, "store", {"content": ORIGINAL, "entities": ["connection pool"]})
    invoke(service, "recall", {"query": "deadlock"})
    service.access.flush()
    before = snapshot(service)
    error = rejected(
        service,
        {
            "content": REWORDED,
            "entities": ["tokio::sync::Semaphore", "Connection-Pool", "brand new entity"],
            "source": f"memory:{next(iter(before['index']))}",
        },
    )
    assert error.code == "duplicate"
    service.access.flush()
    assert snapshot(service) == before
    # The rolled-back entities did not linger in any cache either.
    fresh = stored(service, {"content": DIFFERENT, "entities": ["brand new entity"]})
    assert fresh.entities[0].resolved_by == "new"


def test_a_rejected_bulk_item_leaves_no_entity_behind(make_service: ServiceFactory) -> None:
    """In store_many each item is its own savepoint: a rejected item's new entities vanish."""
    service = make_service()
    first = invoke(
        service, "store", {"content": "the nightly ETL job loads orders into the warehouse"}
    )
    results = store_many(
        service,
        [
            {"content": "a fresh memory about the payroll export", "entities": ["payroll"]},
            {
                "content": "the nightly ETL job loads orders into the warehouse",
                "entities": ["brand-new-entity"],
            },
        ],
    )
    assert "error" not in results[0]
    assert results[1]["error"]["code"] == "duplicate"
    assert results[1]["error"]["existing_id"] == first["id"]
    names = {row["name"] for row in service.meta.entities_of_namespace("default")}
    assert "payroll" in names and "brand new entity" not in names
    # Nor in the resolver's tables (a phantom there would fuzzy-match the name to a lost id).
    fresh = stored(service, {"content": DIFFERENT, "entities": ["brand-new-entity"]})
    assert fresh.entities[0].resolved_by == "new"
    payroll = stored(service, {"content": "payroll export moved to friday", "entities": ["payrol"]})
    assert payroll.entities[0].resolved_by == "fuzzy"


RECURRING = "nightly backup of the invoices database completed without errors"


def test_a_recurring_event_dated_on_another_day_is_not_a_duplicate(
    service: MemoryService,
) -> None:
    monday = invoke(service, "store", {"content": RECURRING, "timestamp": "2026-04-06T02:00:00Z"})
    tuesday = invoke(service, "store", {"content": RECURRING, "timestamp": "2026-04-07T02:00:00Z"})
    assert tuesday["status"] == "stored" and tuesday["id"] != monday["id"]
    # The same day again is the same event: a duplicate.
    with pytest.raises(FerrexError) as again:
        invoke(service, "store", {"content": RECURRING, "timestamp": "2026-04-07T02:30:00Z"})
    assert again.value.code == "duplicate" and again.value.details["existing_id"] == tuesday["id"]
    # Without a timestamp it is a re-store of what is known, whatever day it is now.
    with pytest.raises(FerrexError) as restore:
        invoke(service, "store", {"content": RECURRING})
    assert restore.value.code == "duplicate"


def test_a_same_day_copy_is_a_duplicate_however_many_other_days_exist(
    service: MemoryService,
) -> None:
    days = [f"2026-03-{d:02d}T02:00:00Z" for d in range(1, 9)]
    stored = store_many(service, [{"content": RECURRING, "timestamp": day} for day in days])
    assert all("error" not in s for s in stored), stored
    for day, first in zip(days, stored, strict=True):
        with pytest.raises(FerrexError) as again:
            invoke(
                service, "store", {"content": RECURRING, "timestamp": day.replace("02:00", "05:00")}
            )
        assert again.value.details["existing_id"] == first["id"]
    assert service.meta.count_memories() == len(days)


def test_recurring_events_in_one_batch_are_kept_apart_by_their_dates(
    service: MemoryService,
) -> None:
    stored = store_many(
        service,
        [
            {"content": RECURRING, "timestamp": "2026-04-06T02:00:00Z"},
            {"content": RECURRING, "timestamp": "2026-04-07T02:00:00Z"},
            {"content": RECURRING, "timestamp": "2026-04-07T03:00:00Z"},
        ],
    )
    assert [s.get("status") for s in stored[:2]] == ["stored", "stored"]
    assert stored[2]["error"]["code"] == "duplicate"


def test_a_bulk_batch_rejects_what_one_store_at_a_time_rejects(
    make_service: ServiceFactory,
) -> None:
    """A batch's duplicate searches run in one engine call before its transaction: on a store
    already holding memories (near misses included) its answers are those of the same items
    stored one by one."""
    known = [
        ORIGINAL,
        DIFFERENT,
        "the staging cluster was upgraded to postgres 16.2 on tuesday",
        "deploy of api-server v2.3.1 to production finished at 14:05",
        "the payments team moved the invoice export to friday nights",
    ]
    batch: list[dict[str, Any]] = [
        {"content": REWORDED},  # a rewording of a stored memory: a duplicate
        {"content": "the staging cluster was upgraded to postgres 16.3 on tuesday"},  # one number
        {"content": "deploy of api-server v2.3.1 to production finished at 14:05"},  # exact
        # A fact (searched in the transaction, its subject resolved there) beside the episode.
        {"subject": "payments team", "predicate": "exports_invoices_on", "object": "friday"},
        {"content": "a brand new memory about the office plants being watered"},
        {"content": "a brand new memory about the office plants being watered"},  # in-batch copy
        {"content": "deploy of api-server v2.3.2 to production finished at 14:05"},  # one id
    ]

    def outcome(service: MemoryService, ids: dict[str, str], answer: dict[str, Any]) -> Any:
        if "error" in answer:
            error = answer["error"]
            return (error["code"], ids.get(error.get("existing_id", ""), "batch"))
        return answer["status"]

    def seeded() -> tuple[MemoryService, dict[str, str]]:
        service = make_service()
        ids = {invoke(service, "store", {"content": text})["id"]: text for text in known}
        return service, ids

    bulk, bulk_ids = seeded()
    in_bulk = [outcome(bulk, bulk_ids, a) for a in store_many(bulk, batch)]
    single, single_ids = seeded()
    one_by_one = []
    for item in batch:
        try:
            one_by_one.append(outcome(single, single_ids, invoke(single, "store", item)))
        except FerrexError as exc:
            one_by_one.append(outcome(single, single_ids, {"error": exc.to_dict()}))
    assert in_bulk == one_by_one
    assert in_bulk[0] == ("duplicate", ORIGINAL) and in_bulk[2][0] == "duplicate"
    assert in_bulk[1] == in_bulk[3] == in_bulk[6] == "stored" and in_bulk[5][0] == "duplicate"
