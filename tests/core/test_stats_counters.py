"""Stats from counters kept on write (core/lifecycle/attention.py, schema version 2), never a scan.

Proves: the write-kept counters (memories per type / current / pinned, current memories per
review bucket) agree with a memory-by-memory count after every kind of write (store, supersede,
duplicate, confirm, pin through import, forget, eviction); the staleness and review counts
computed bucket by bucket equal the per-memory rule at every instant of a year, including the
instants when a threshold falls inside a bucket's hour (those buckets are read memory by
memory, and only those); a store built before the counters existed (schema 1) gets them on
open; and a bulk of memories written within one hour is one bucket, not a row per memory.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from tests.support.clock import MovableClock

from ferrex.core.errors import FerrexError
from ferrex.core.lifecycle.attention import classify, count_attention
from ferrex.core.ops.transfer import export_lines, import_records
from ferrex.core.service import MemoryService
from ferrex.server.calls import run_tool as invoke
from ferrex.server.calls import store_many
from ferrex.store.schema import SCHEMA_VERSION
from ferrex.store.sqlite import SqliteStore

ServiceFactory = Callable[..., MemoryService]
NOW = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


def scanned(service: MemoryService, namespace: str = "default") -> dict[str, object]:
    """The numbers the old stats computed by reading every memory."""
    memories = service.meta.memories_in_namespace(namespace, with_entities=False)
    current = [m for m in memories if m.t_invalid is None]
    now = service.now()
    config = service.settings.staleness
    classes = Counter(classify(m, now, config) for m in current)
    levels: Counter[str] = Counter()
    needs: Counter[str] = Counter()
    for (level, need), n in classes.items():
        levels[level] += n
        needs[need] += n
    return {
        "total": len(memories),
        "current": len(current),
        "pinned": sum(1 for m in memories if m.pinned),
        "by_type": Counter(m.type.value for m in memories),
        "levels": levels,
        "stale": needs["stale"],
        "unvalidated": needs["unvalidated"],
    }


def counted(service: MemoryService, namespace: str = "default") -> dict[str, object]:
    counts = service.meta.memory_counts(namespace)
    attention = count_attention(service.meta, namespace, service.now(), service.settings.staleness)
    by_type: Counter[str] = Counter()
    for c in counts:
        by_type[c.type] += c.n
    return {
        "total": sum(c.n for c in counts),
        "current": sum(c.n for c in counts if c.current),
        "pinned": sum(c.n for c in counts if c.pinned),
        "by_type": by_type,
        "levels": +attention.levels,
        "stale": attention.stale,
        "unvalidated": attention.unvalidated,
    }


TOPICS = ["billing api", "search cluster", "mobile app", "ledger", "ingest queue", "wiki"]
EVENTS = ["deploy went fine", "had an outage", "was load tested", "got a new owner"]


def put(service: MemoryService, arguments: dict[str, object]) -> str | None:
    try:
        return str(invoke(service, "store", arguments)["id"])
    except FerrexError as exc:
        assert exc.code == "duplicate"
        return None


def build(service: MemoryService, clock: MovableClock) -> list[str]:
    """A year of writes: episodes, facts (superseded, contested), procedures, confirmations."""
    ids = []
    for day in range(0, 360, 9):
        clock.current = NOW + timedelta(days=day, minutes=7 * (day % 5))
        topic = TOPICS[day % len(TOPICS)]
        event = EVENTS[(day // 9) % len(EVENTS)]
        ids.append(put(service, {"content": f"On day {day} the {topic} {event}"}) or "")
        fact = {"subject": f"service {day % 4}", "predicate": "uses", "object": f"pg {day}"}
        ids.append(put(service, fact) or "")
        if day % 27 == 0:
            invoke(service, "reflect", {"confirm_ids": [i for i in ids[len(ids) // 2 :][:1] if i]})
        if day % 45 == 0:
            steps = [f"drain {topic} {day}", "restart it"]
            ids.append(
                put(service, {"type": "procedural", "name": f"runbook-{day % 2}", "steps": steps})
                or ""
            )
        if day % 60 == 0:
            lead = {"subject": "team", "predicate": "lead", "object": f"person {day}"}
            put(service, {**lead, "confidence": 0.6})
    ids = [i for i in ids if i]
    return ids


def test_counters_agree_with_a_scan_after_every_kind_of_write(
    make_service: ServiceFactory,
) -> None:
    clock = MovableClock(NOW)
    service = make_service(clock=clock)
    ids = build(service, clock)
    assert counted(service) == scanned(service)
    assert put(service, {"content": "On day 0 the billing api deploy went fine"}) is None
    invoke(service, "forget", {"ids": ids[:5]})
    invoke(service, "reflect", {"confirm_ids": ids[10:14]})
    assert counted(service) == scanned(service)
    # The total a recall reads (BM25 normalisation) comes from the counters too.
    rows = service.meta._q("SELECT namespace, COUNT(*) AS n FROM memories GROUP BY namespace")
    assert rows and all(service.meta.count_memories(r["namespace"]) == r["n"] for r in rows)
    assert service.meta.count_memories() == sum(r["n"] for r in rows)
    assert service.meta.count_memories("no such namespace") == 0
    exported = list(export_lines(service))
    other = make_service(clock=clock)
    for line in exported:  # pinned and superseded rows arrive through import's own writes
        if line.get("kind") == "memory" and line.get("type") == "episodic":
            line["pinned"] = True
    import_records(other, exported)
    assert counted(other) == scanned(other)
    assert counted(other)["pinned"] == scanned(other)["pinned"]


def test_bucket_counts_equal_the_rule_at_every_instant_of_a_year(
    make_service: ServiceFactory,
) -> None:
    clock = MovableClock(NOW)
    service = make_service(clock=clock)
    build(service, clock)
    end = clock.current
    read_somewhere = False
    # Every 7 days 5 hours 13 minutes for a year past the last write: thresholds fall at every
    # position inside the buckets' hours.
    step = timedelta(days=7, hours=5, minutes=13)
    moment = end
    for _ in range(60):
        clock.current = moment
        assert counted(service) == scanned(service), moment
        attention = count_attention(service.meta, "default", moment, service.settings.staleness)
        read_somewhere = read_somewhere or attention.memories_read > 0
        moment += step
    # And exactly on a threshold inside an hour: the first episode turns aging 30 days after
    # it was written, 7 minutes into its hour, so its bucket is read memory by memory.
    first = service.meta.memories_in_namespace(
        "default", where="type = 'episodic'", order="created_at", limit=1
    )[0]
    fresh_days = service.settings.staleness.thresholds("default", "episodic").fresh
    clock.current = first.created_at + timedelta(days=fresh_days, seconds=-30)
    before = count_attention(service.meta, "default", clock.current, service.settings.staleness)
    assert counted(service) == scanned(service)
    clock.current = first.created_at + timedelta(days=fresh_days, seconds=30)
    after = count_attention(service.meta, "default", clock.current, service.settings.staleness)
    assert counted(service) == scanned(service)
    assert before.levels != after.levels or before.unvalidated != after.unvalidated
    assert read_somewhere or before.memories_read or after.memories_read


def test_a_bulk_written_within_an_hour_is_one_bucket(make_service: ServiceFactory) -> None:
    clock = MovableClock(NOW)
    service = make_service(clock=clock)
    queues = ["billing", "search", "ingest", "mobile", "ledger"] * 12
    results = store_many(
        service,
        [{"content": f"ticket {i} about the {w} queue was closed"} for i, w in enumerate(queues)],
    )
    stored = sum(1 for r in results if r.get("status") == "stored")
    assert stored >= 50
    attention = count_attention(service.meta, "default", clock.current, service.settings.staleness)
    assert attention.buckets == 1 and attention.memories_read == 0
    assert attention.levels["fresh"] == stored
    assert invoke(service, "stats", {})["total"] == stored


def test_a_store_from_before_the_counters_gets_them_on_open(
    make_service: ServiceFactory,
) -> None:
    clock = MovableClock(NOW)
    service = make_service(clock=clock)
    build(service, clock)
    expected = scanned(service)
    path = service.settings.db_path
    service.close()
    raw = sqlite3.connect(str(path))
    for (name,) in raw.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        raw.execute(f"DROP TRIGGER {name}")
    raw.execute("DROP TABLE memory_counts")
    raw.execute("DROP TABLE review_buckets")
    raw.execute("DROP INDEX idx_memories_current_single_facts")
    raw.execute("DROP TABLE call_keys")  # schema 3 (later than the counters)
    raw.execute("DROP TABLE text_writes")  # schema 4
    raw.execute("DROP INDEX idx_memories_superseded_by")  # schema 5
    raw.execute("PRAGMA user_version=1")
    raw.commit()
    raw.close()
    reopened = SqliteStore(path)
    try:
        assert reopened.schema_version == SCHEMA_VERSION == 5
        counts = reopened.memory_counts("default")
        assert sum(c.n for c in counts) == expected["total"]
        buckets = reopened.review_buckets("default")
        assert sum(b.n for b in buckets) == expected["current"]
    finally:
        reopened.close()
