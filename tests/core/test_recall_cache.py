"""The recall cache (spec Phase 5 "Semantic caching on recall": LRU, embed-hash keyed).

Proves: a cache hit returns exactly what a miss would have, compared over a sequence of recalls
with every kind of parameter between a cache-enabled and a cache-disabled service on identical
copies of one store (and on one service before and after ``cache.invalidate()``), including
freshness that changed since the entry was cached; hits are counted (detailed stats); any store
or forget in the namespace invalidates it and the results change accordingly; a write to another
namespace does not.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.support.clock import MovableClock

from ferrex.core.clock import parse_timestamp, to_iso
from ferrex.core.ops.transfer import export_lines, import_records
from ferrex.core.recall.neighbours import similarities, stored_neighbours
from ferrex.core.service import MemoryService
from ferrex.server.calls import run_tool as invoke

NOW = datetime(2026, 5, 4, 8, 30, tzinfo=UTC)
ServiceFactory = Callable[..., MemoryService]
QUIET_ACCESS = {"access_flush_seconds": 60}  # only explicit flushes write access bumps


def ago(days: float) -> str:
    return to_iso(NOW - timedelta(days=days))


MEMORIES: list[dict[str, Any]] = [
    {
        "content": "the payments service timed out because the connection pool was too small",
        "entities": ["payments", "connection-pool"],
        "timestamp": ago(2),
    },
    {
        "content": "we raised the payments connection pool from 10 to 50 connections",
        "entities": ["payments", "connection-pool"],
        "timestamp": ago(45),
    },
    {
        "content": "an old incident: the payments database ran out of disk space",
        "entities": ["payments"],
        "timestamp": ago(140),
    },
    {
        "content": "the search team tuned the Elasticsearch heap to 16 GB",
        "entities": ["search"],
        "timestamp": ago(10),
    },
    {"subject": "payments", "predicate": "uses", "object": "postgres 14", "timestamp": ago(300)},
    {"subject": "payments", "predicate": "uses", "object": "postgres 16", "timestamp": ago(20)},
    {
        "type": "procedural",
        "name": "resize-connection-pool",
        "steps": [
            "edit the pool size in values.yaml",
            "roll the deployment",
            "watch the pool saturation graph",
        ],
    },
]

QUERIES: list[dict[str, Any]] = [
    {"query": "payments connection pool timeout"},
    {"query": "payments connection pool timeout", "limit": 2},
    {"query": "payments connection pool timeout", "include_stale": True},
    {"query": "what database does payments use", "include_invalidated": True},
    {"query": "what database does payments use", "types": ["semantic"]},
    {"query": "payments incidents", "entities": ["payments"], "include_stale": True},
    {"query": "payments incidents", "time_range": {"after": ago(60)}},
    {"query": "how to resize the pool", "max_tokens": 40},
    {"query": "heap size of the search cluster", "entities": ["search", "nobody-knows"]},
]


def seed(service: MemoryService) -> None:
    """Store MEMORIES, each at the time of its ``timestamp`` (age counts from creation)."""
    clock = service.clock
    assert isinstance(clock, MovableClock)
    start = clock.current
    for item in MEMORIES:
        clock.current = parse_timestamp(item["timestamp"]) if "timestamp" in item else start
        assert invoke(service, "store", item)["status"] in {"stored", "superseded"}
    clock.current = start


@pytest.fixture
def service(make_service: ServiceFactory) -> MemoryService:
    return make_service(clock=MovableClock(NOW))


@pytest.fixture
def twin_stores(make_service: ServiceFactory, tmp_path: Path) -> tuple[Path, Path]:
    """Two identical copies of one store on disk."""
    original = tmp_path / "original"
    builder = make_service(original, clock=MovableClock(NOW))
    seed(builder)
    builder.close()
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    return original, copy


def test_hits_return_exactly_what_misses_return(
    make_service: ServiceFactory, twin_stores: tuple[Path, Path]
) -> None:
    clock = MovableClock(NOW)
    cached = make_service(twin_stores[0], clock=clock, lifecycle=QUIET_ACCESS)
    uncached = make_service(
        twin_stores[1], clock=clock, lifecycle=QUIET_ACCESS, cache={"enabled": False}
    )
    for round_number in range(3):
        for query in QUERIES:
            hit_or_miss = invoke(cached, "recall", query)
            reference = invoke(uncached, "recall", query)
            assert hit_or_miss == reference, (round_number, query)
            assert reference["results"] or reference.get("stale_held_back", 0), query
        cached.access.flush()
        uncached.access.flush()
        clock.advance(30)  # ages everything: staleness changes under the cached entries
    counters = invoke(cached, "stats", {"detailed": True})["cache"]
    # limit and include_stale apply after the cached retrieval: the first three queries share
    # one entry, so 7 distinct entries were missed once and hit every other time.
    assert counters["misses"] == len(QUERIES) - 2
    assert counters["hits"] == 3 * len(QUERIES) - counters["misses"]
    assert invoke(uncached, "stats", {"detailed": True})["cache"]["hits"] == 0


def test_hit_equals_the_miss_after_invalidate(make_service: ServiceFactory) -> None:
    service = make_service(clock=MovableClock(NOW), lifecycle=QUIET_ACCESS)
    seed(service)
    query = {"query": "payments connection pool timeout", "include_stale": True}
    first = invoke(service, "recall", query)
    service.access.flush()
    hit = invoke(service, "recall", query)
    assert service.cache.stats()["hits"] == 1
    assert hit != first  # the access bump of the first call shows through the cached entry
    assert {r["freshness"]["access_count"] for r in hit["results"]} == {1}
    service.cache.invalidate()
    miss = invoke(service, "recall", query)
    assert service.cache.stats()["hits"] == 1
    assert miss == hit


def test_explain_reports_cache_hits(service: MemoryService) -> None:
    seed(service)
    query = {"query": "payments connection pool timeout", "explain": True}
    assert invoke(service, "recall", query)["explain"]["cache_hit"] is False
    assert invoke(service, "recall", query)["explain"]["cache_hit"] is True


def ids_of(answer: dict[str, Any]) -> list[str]:
    return [r["id"] for r in answer["results"]]


def test_store_in_the_namespace_invalidates(service: MemoryService) -> None:
    seed(service)
    query = {"query": "search cluster heap size", "limit": 10}
    before = invoke(service, "recall", query)
    invoke(service, "recall", query)
    hits = service.cache.stats()["hits"]
    assert hits == 1
    new = invoke(
        service,
        "store",
        {"content": "the search cluster heap was lowered to 12 GB after GC pauses"},
    )
    after = invoke(service, "recall", query)
    assert service.cache.stats()["hits"] == hits  # a miss
    assert new["id"] in ids_of(after) and new["id"] not in ids_of(before)


def test_forget_in_the_namespace_invalidates(service: MemoryService) -> None:
    seed(service)
    query = {"query": "search cluster heap size", "limit": 10}
    before = invoke(service, "recall", query)
    invoke(service, "recall", query)
    victim = ids_of(before)[0]
    invoke(service, "forget", {"ids": [victim]})
    after = invoke(service, "recall", query)
    assert service.cache.stats()["hits"] == 1
    assert victim not in ids_of(after)
    assert set(ids_of(after)) == set(ids_of(before)) - {victim}
    # The order is what a recall without any cache computes now (rank-based scores shift
    # when a result goes, so it need not be the old order minus the victim).
    service.cache.invalidate()
    assert ids_of(invoke(service, "recall", query)) == ids_of(after)


def test_a_write_to_another_namespace_keeps_the_cache(service: MemoryService) -> None:
    seed(service)
    query = {"query": "search cluster heap size", "limit": 10}
    before = invoke(service, "recall", query)
    invoke(
        service,
        "store",
        {
            "content": "the search cluster heap is 64 GB in the analytics project",
            "namespace": "analytics",
        },
    )
    other = invoke(service, "recall", {**query, "namespace": "analytics"})
    assert len(other["results"]) == 1
    again = invoke(service, "recall", query)
    assert service.cache.stats()["hits"] == 1
    assert ids_of(again) == ids_of(before)


def test_each_spelling_of_a_query_has_its_own_entry(service: MemoryService) -> None:
    """Uncased embeddings make "Tokio" and "tokio" one vector; a cased cross-encoder scores
    them differently, so they must not share cached scores."""
    seed(service)
    invoke(service, "recall", {"query": "Payments connection pool"})
    invoke(service, "recall", {"query": "payments connection pool"})
    assert service.cache.stats()["hits"] == 0
    invoke(service, "recall", {"query": "payments connection pool"})
    assert service.cache.stats()["hits"] == 1


@pytest.mark.parametrize(
    "write",
    [
        lambda s, mid: invoke(s, "reflect", {"confirm_ids": [mid]}),
        lambda s, mid: invoke(s, "reflect", {"pin_ids": [mid]}),
        lambda s, mid: invoke(s, "reflect", {"unpin_ids": [mid]}),
    ],
    ids=["confirm", "pin", "unpin"],
)
def test_reflect_writes_invalidate(
    service: MemoryService, write: Callable[[MemoryService, str], Any]
) -> None:
    seed(service)
    query = {"query": "search cluster heap size", "limit": 10}
    target = ids_of(invoke(service, "recall", query))[0]
    hits = service.cache.stats()["hits"]
    write(service, target)
    invoke(service, "recall", query)
    assert service.cache.stats()["hits"] == hits  # recomputed, not served from the cache


def test_an_eviction_invalidates(make_service: ServiceFactory) -> None:
    clock = MovableClock(NOW)
    service = make_service(clock=clock, lifecycle={"max_memories": 2})
    old = invoke(service, "store", {"content": "the search cluster heap was raised to 31 GB"})["id"]
    clock.current = NOW + timedelta(days=120)  # old is stale now: the first to go
    invoke(service, "store", {"content": "the search cluster was moved to new hardware"})
    query = {"query": "search cluster heap", "limit": 10, "include_stale": True}
    assert old in ids_of(invoke(service, "recall", query))
    answer = invoke(service, "store", {"content": "kibana dashboards were cleaned up"})
    assert answer["evicted"] == 1
    assert old not in ids_of(invoke(service, "recall", query))


def test_the_cache_is_a_bounded_lru(make_service: ServiceFactory) -> None:
    service = make_service(clock=MovableClock(NOW), cache={"size": 2})
    seed(service)
    first, second, third = (
        {"query": "search cluster heap size"},
        {"query": "payments connection pool timeout"},
        {"query": "how to resize the pool"},
    )
    invoke(service, "recall", first)
    invoke(service, "recall", second)
    invoke(service, "recall", first)  # first is now the most recently used
    invoke(service, "recall", third)  # evicts second, the least recently used
    assert service.cache.stats()["entries"] == 2
    hits = service.cache.stats()["hits"]
    invoke(service, "recall", first)
    assert service.cache.stats()["hits"] == hits + 1
    invoke(service, "recall", second)
    assert service.cache.stats()["hits"] == hits + 1  # second was dropped


def test_context_neighbour_lookups_are_kept_per_write_generation(service: MemoryService) -> None:
    """A hit's stored neighbours and the cosines of its pairs are read once per namespace
    generation (core/cache.py): asked again, they are the same without a store lookup; a pair
    the index gives no cosine for (a memory it does not hold) stays without one; a store in the
    namespace starts a new generation that reads them again."""
    ids = [
        invoke(service, "store", {"content": text})["id"]
        for text in (
            "The staging cluster runs on three arm nodes",
            "The staging cluster was moved to the new region last week",
            "Lunch on Friday is at the noodle place",
        )
    ]
    deps = service.deps
    namespace = service.deps.namespace
    model = service.embedder.info.pin
    pairs = {ids[1]: [ids[0], ids[2], "mem_not_in_the_index"]}
    generation = service.cache.generation(namespace)
    first = similarities(deps, namespace, generation, model, pairs)
    near = stored_neighbours(deps, namespace, generation, [ids[1]], 2)
    assert set(first) == {(ids[1], ids[0]), (ids[1], ids[2])}  # none for the unknown memory
    assert first[(ids[1], ids[0])] > first[(ids[1], ids[2])]  # about the same thing
    assert [n[0] for n in near[ids[1]]] == [ids[0], ids[2]]

    asked: list[Any] = []
    index_call = service.index.dense_similarities
    meta_call = service.meta.stored_neighbours
    service.index.dense_similarities = lambda *a: asked.append(a) or index_call(*a)  # type: ignore[method-assign]
    service.meta.stored_neighbours = lambda *a: asked.append(a) or meta_call(*a)  # type: ignore[method-assign]
    try:
        assert similarities(deps, namespace, generation, model, pairs) == first
        assert stored_neighbours(deps, namespace, generation, [ids[1]], 2) == near
        assert asked == []  # all of it kept, the missing cosine too
        invoke(service, "store", {"content": "The staging cluster gets a fourth node in May"})
        later = service.cache.generation(namespace)
        assert later != generation
        assert similarities(deps, namespace, later, model, pairs) == pytest.approx(first)
        assert len(stored_neighbours(deps, namespace, later, [ids[1]], 2)[ids[1]]) == 3
        assert len(asked) == 2  # read again, once each
    finally:
        del service.index.dense_similarities, service.meta.stored_neighbours


def test_an_import_between_two_memories_changes_their_neighbours_at_once(
    make_service: ServiceFactory, tmp_path: Path
) -> None:
    """An import keeps each memory's ``created_at``, so one can land between two stored ones,
    and it ends by invalidating every namespace: that moves the generation of a namespace this
    process never wrote to as well (a server just started over an existing store). The recall
    after the import credits the imported reply as the question's answer, as a fresh process
    does, not the reply stored after it."""
    question = "Gina: How much rent do you pay for the studio downtown?"
    reply = "Jon: Oh, seven hundred, give or take."
    ask = {"query": "What rent does Gina's friend pay for the studio?"}
    data = tmp_path / "one-store"

    def ranking(service: MemoryService) -> list[tuple[str, float]]:
        return [(r["id"], r["score"]) for r in invoke(service, "recall", ask)["results"]]

    writer = make_service(data)
    ids = [invoke(writer, "store", {"content": text})["id"] for text in (question, reply)]
    for n in range(12):
        invoke(writer, "store", {"content": f"The shuttle to terminal {n} leaves every hour"})
    header, *memories = [r for r in export_lines(writer) if r["kind"] in ("header", "memory")]
    writer.close()
    by_id = {r["id"]: r for r in memories}
    asked_at = parse_timestamp(by_id[ids[0]]["created_at"])
    replied_at = parse_timestamp(by_id[ids[1]]["created_at"])
    assert asked_at < replied_at
    between = to_iso(asked_at + (replied_at - asked_at) / 2)
    inserted = {
        **by_id[ids[1]],
        "id": "mem_0000imported0reply00000001",
        "content": "Jon: Nine hundred a month, utilities included.",
        **{key: between for key in ("created_at", "updated_at", "event_time", "t_valid")},
    }

    reader = make_service(data)  # has written nothing: no generation of its own yet
    before = ranking(reader)
    assert [i for i, _ in before[:2]] == ids and before[1][1] > 0.5  # the reply: the answer
    assert import_records(reader, [header, inserted])["imported"] == 1
    after = ranking(reader)
    assert [i for i, _ in after[:2]] == [ids[0], inserted["id"]], after
    assert after[1][1] > 0.5
    reader.close()
    fresh = ranking(make_service(data))
    assert [i for i, _ in fresh] == [i for i, _ in after]
    assert [s for _, s in fresh] == pytest.approx([s for _, s in after], abs=1e-3)


def test_stored_neighbours_carry_both_types(service: MemoryService) -> None:
    """SQLite returns each neighbour's type and the hit's; core decides what is context (only
    events for events: core/recall/context.py)."""
    event = invoke(service, "store", {"content": "The deploy of the api failed at 10:02"})
    fact = invoke(
        service, "store", {"subject": "api", "predicate": "deployed_by", "object": "argo"}
    )
    later = invoke(service, "store", {"content": "The api deploy was retried at 10:05"})
    near = service.meta.stored_neighbours(service.deps.namespace, [event["id"]], 2)
    assert [(n[0], n[6], n[7]) for n in near[event["id"]]] == [
        (fact["id"], "semantic", "episodic"),
        (later["id"], "episodic", "episodic"),
    ]
