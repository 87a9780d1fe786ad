"""Export -> import is lossless (``ferrex export`` / ``ferrex import``, the operator CLI).

A store is populated with every feature: the three memory types, entities with aliases and an
alias candidate, facts superseded automatically and explicitly, a contradiction, a multi-valued
predicate, procedure versions and a rollback, pinned memories, access counts, validations
(reflect confirm and citation by ``source``) and an eviction in the audit log. It is exported
with the CLI and imported with the CLI into a fresh data dir. Then:

- every recall (many filters: types, entities, time ranges, stale, invalidated, as_of, versions,
  explain) and the brief ``stats`` answer identically on both stores, and so does ``reflect``;
- detailed ``stats`` is identical except four instrumentation fields (see ``INSTRUMENTATION``);
- importing the same file again reports every memory as a duplicate and changes nothing;
- exporting the imported store gives back the original export, line for line (only
  ``exported_at`` differs);
- ``ferrex export --namespace NS`` exports that namespace only, and imports on its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.support.clock import MovableClock
from tests.support.harness import ServiceFactory, cli

from ferrex.core.service import MemoryService
from ferrex.server.calls import run_tool as invoke

# Close to the real clock: the CLI runs start-up upkeep (retention sweep) with the real time,
# and must find nothing to evict that the in-process services would keep.
NOW = datetime.now(UTC).replace(microsecond=0)

# Detailed stats fields that describe the process and the files, not the memories:
#   disk_mb    - bytes on disk (SQLite page layout and index segments differ after a rebuild);
#                storage_mb (the data the memories hold) must match and is compared
#   free_mb    - free space on the disk (anything else on the machine changes it)
#   cache      - recall-cache counters of this process (hits/misses of the calls it served)
#   index      - engine bookkeeping of the vector index (segments / indexed vectors); its
#                point count is compared separately and must match
INSTRUMENTATION = ("disk_mb", "free_mb", "cache", "index")

RECALLS: tuple[dict[str, Any], ...] = (
    {"query": "database outage"},
    {"query": "who owns the api server", "include_invalidated": True, "explain": True},
    {"query": "api server owner", "types": ["semantic"]},
    {"query": "deploy", "types": ["procedural"], "include_invalidated": True},
    {"query": "deploy procedure", "version": 1},
    {"query": "postgres", "entities": ["Postgres"], "limit": 20},
    {"query": "New York office", "entities": ["NYC"]},
    {"query": "old incident", "include_stale": True, "limit": 20},
    {"query": "outage", "time_range": {"after": (NOW - timedelta(days=60)).isoformat()}},
    {"query": "api server", "as_of": (NOW - timedelta(days=20)).isoformat()},
    {"query": "languages spoken", "types": ["semantic"], "limit": 10},
    {"query": "gateway port", "limit": 10},
    {"query": "team notes", "namespace": "team-b"},
    {"query": "billing", "max_tokens": 40},
)


def days_ago(days: float) -> str:
    return (NOW - timedelta(days=days)).isoformat()


@contextmanager
def recorded_days_ago(service: MemoryService, days: float) -> Iterator[None]:
    """Store as if ``days`` ago (age counts from creation, not from the event's timestamp)."""
    clock = service.clock
    assert isinstance(clock, MovableClock)
    clock.current = NOW - timedelta(days=days)
    try:
        yield
    finally:
        clock.current = NOW


def populate(service: MemoryService) -> dict[str, str]:
    """Every feature the export must carry; returns a few ids by name."""
    ids: dict[str, str] = {}

    def store(arguments: dict[str, Any]) -> dict[str, Any]:
        return invoke(service, "store", arguments)

    ids["outage"] = store(
        {
            "content": "The PostgreSQL primary ran out of disk during the database outage",
            "timestamp": days_ago(3),
            "entities": ["PostgreSQL", "New York City"],
            "context": {"ticket": "OPS-12", "severity": 2},
            "source": "pagerduty",
        }
    )["id"]
    store({"content": "Postgres replicas lagged behind", "entities": ["Postgres"]})  # fuzzy alias
    store({"content": "Opened the NYC office downtown", "entities": ["NYC"]})  # alias candidate
    with recorded_days_ago(service, 200):
        ids["old"] = store(
            {"content": "An old incident with the billing cron job", "timestamp": days_ago(200)}
        )["id"]
    with recorded_days_ago(service, 120):
        ids["pinned"] = store(
            {
                "content": "Never run migrations on Fridays",
                "pinned": True,
                "timestamp": days_ago(120),
            }
        )["id"]
    store({"content": "team notes for the second team", "namespace": "team-b"})
    # Facts: automatic supersede, explicit supersede, contradiction, multi-valued.
    first = store({"subject": "api server", "predicate": "owned by", "object": "Ada"})
    store(
        {
            "subject": "api server",
            "predicate": "owned by",
            "object": "Grace",
            "t_valid": days_ago(10),
        }
    )
    store({"subject": "gateway", "predicate": "listens on port", "object": "8080"})
    store(
        {"subject": "gateway", "predicate": "listens on port", "object": "9090", "confidence": 0.3}
    )
    for language in ("Python", "Rust"):
        store({"subject": "Ada", "predicate": "speaks", "object": language, "multi_valued": True})
    explicit = store({"subject": "billing", "predicate": "runs on", "object": "VM cluster"})
    store(
        {
            "subject": "billing",
            "predicate": "runs on",
            "object": "Kubernetes",
            "supersedes": explicit["id"],
            "source": f"memory:{ids['outage']}",  # a citation validates the cited memory
        }
    )
    # Procedures: two versions and a rollback to the first.
    for steps in (["build", "test", "ship"], ["build", "test", "canary", "ship"]):
        store({"type": "procedural", "name": "deploy", "steps": steps})
    store({"type": "procedural", "name": "deploy", "rollback_to": 1})
    # History: a fact superseded by one valid since long ago (kept: the retention window counts
    # from the supersession), and an eviction in the audit log (a budget of one memory less).
    store(
        {"subject": "cache", "predicate": "uses", "object": "memcached", "t_valid": days_ago(400)}
    )
    store({"subject": "cache", "predicate": "uses", "object": "redis", "t_valid": days_ago(300)})
    assert service.sweep_retention(force=True) == 0
    with recorded_days_ago(service, 330):
        store({"content": "a forgotten lunch order from last year", "timestamp": days_ago(330)})
    lifecycle = service.settings.lifecycle
    lifecycle.max_memories = service.meta.count_memories() - 1
    assert service.enforce_budget() == 1
    lifecycle.max_memories = 0
    # Access counts, validations and pins.
    for request in RECALLS[:4]:
        invoke(service, "recall", dict(request))
    service.access.flush()
    invoke(service, "reflect", {"confirm_ids": [ids["old"]], "pin_ids": [first["id"]]})
    return ids


# =========================================================================== CLI


def run_cli(data_dir: Path, models_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if args[0] == "import" and not (data_dir / "ferrex.db").exists():
        run_cli(data_dir, models_dir, "init")  # operator commands never create a store
    done: subprocess.CompletedProcess[str] = cli(
        data_dir, models_dir, "--model-tier", "small", *args
    )
    return done


def export_file(data_dir: Path, models_dir: Path, target: Path, *args: str) -> list[dict[str, Any]]:
    run_cli(data_dir, models_dir, "export", "-o", str(target), *args)
    return [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]


def without_export_time(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = [dict(r) for r in records]
    assert out[0]["kind"] == "header"
    out[0].pop("exported_at")
    return out


def sqlite_digest(db_path: Path) -> str:
    digest = hashlib.sha256()
    with closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in sorted(t for t in tables if not t.startswith("sqlite_")):
            for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1"):
                digest.update(repr(row).encode())
    return digest.hexdigest()


# =========================================================================== comparisons


def answers(service: MemoryService) -> list[Any]:
    """The same sequence of calls on a store; access bumps are flushed after every recall."""
    out: list[Any] = []
    for request in RECALLS:
        out.append(invoke(service, "recall", dict(request)))
        service.access.flush()
    for namespace in ("default", "team-b"):
        out.append(invoke(service, "stats", {"namespace": namespace}))
        out.append(invoke(service, "reflect", {"namespace": namespace, "limit": 50}))
    return out


def detailed_stats(service: MemoryService, namespace: str) -> tuple[dict[str, Any], int]:
    stats = invoke(service, "stats", {"namespace": namespace, "detailed": True})
    points = stats["index"]["points_all_namespaces"]
    return {k: v for k, v in stats.items() if k not in INSTRUMENTATION}, points


@pytest.fixture
def exported(
    make_service: ServiceFactory, tmp_path: Path, models_dir: Path
) -> tuple[Path, Path, list[dict[str, Any]]]:
    source = tmp_path / "source"
    service = make_service(source, clock=MovableClock(NOW))
    populate(service)
    service.close()
    records = export_file(source, models_dir, tmp_path / "export.jsonl")
    return source, tmp_path / "export.jsonl", records


def test_round_trip_through_the_cli_is_lossless(
    exported: tuple[Path, Path, list[dict[str, Any]]],
    make_service: ServiceFactory,
    tmp_path: Path,
    models_dir: Path,
) -> None:
    source, export_path, records = exported
    kinds = {r["kind"] for r in records}
    assert kinds == {"header", "entity", "memory", "audit"}
    assert any(r["kind"] == "entity" and r["aliases"] for r in records)
    assert any(r["kind"] == "entity" and r["alias_candidates"] for r in records)
    assert any(r["kind"] == "audit" and r["action"] == "evict" for r in records)
    memories = [r for r in records if r["kind"] == "memory"]
    assert {m["type"] for m in memories} == {"episodic", "semantic", "procedural"}
    assert any(m["access_count"] > 0 for m in memories) and any(m["pinned"] for m in memories)
    assert any(m["last_validated"] for m in memories) and any(m["t_invalid"] for m in memories)

    target = tmp_path / "target"
    # Small batches: entities travel with every batch, audit rows with the last one; the
    # comparisons below prove nothing is lost or doubled across batches.
    done = run_cli(target, models_dir, "import", "--batch", "5", str(export_path))
    assert len(memories) > 3 * 5
    assert f"imported {len(memories)} memories" in done.stderr
    assert os.stat(target).st_mode & 0o777 == 0o700

    again = without_export_time(export_file(target, models_dir, tmp_path / "again.jsonl"))
    assert again == without_export_time(records)

    original = make_service(source, clock=lambda: NOW)
    restored = make_service(target, clock=lambda: NOW)
    assert answers(restored) == answers(original)
    for namespace in ("default", "team-b"):
        assert detailed_stats(restored, namespace) == detailed_stats(original, namespace)


def test_importing_twice_reports_duplicates_and_changes_nothing(
    exported: tuple[Path, Path, list[dict[str, Any]]], tmp_path: Path, models_dir: Path
) -> None:
    _, export_path, records = exported
    memory_ids = [r["id"] for r in records if r["kind"] == "memory"]
    target = tmp_path / "twice"
    run_cli(target, models_dir, "import", str(export_path))
    before = sqlite_digest(target / "ferrex.db")
    done = run_cli(target, models_dir, "import", str(export_path))
    assert "imported 0 memories" in done.stderr
    assert f"{len(memory_ids)} already present" in done.stderr
    listed = done.stderr.split("duplicates: ", 1)[1].split("\n", 1)[0].split(", ")
    assert listed == memory_ids[:50]
    assert sqlite_digest(target / "ferrex.db") == before


def test_two_overlapping_exports_concatenated_import_once_with_duplicates_reported(
    exported: tuple[Path, Path, list[dict[str, Any]]], tmp_path: Path, models_dir: Path
) -> None:
    """The same memory twice in one file (two exports concatenated): the first copy is imported,
    the second reported as a duplicate (both copies in one import batch), and the store matches
    a single import."""
    _, export_path, records = exported
    memory_ids = [r["id"] for r in records if r["kind"] == "memory"]
    doubled = tmp_path / "doubled.jsonl"
    doubled.write_text(export_path.read_text(encoding="utf-8") * 2, encoding="utf-8")
    done = run_cli(tmp_path / "doubled", models_dir, "import", str(doubled))
    assert f"imported {len(memory_ids)} memories" in done.stderr
    assert f"{len(memory_ids)} already present" in done.stderr
    single = tmp_path / "single"
    run_cli(single, models_dir, "import", str(export_path))
    with (
        closing(sqlite3.connect(tmp_path / "doubled" / "ferrex.db")) as a,
        closing(sqlite3.connect(single / "ferrex.db")) as b,
    ):
        query = "SELECT id, content, subject, object, t_invalid FROM memories ORDER BY id"
        assert a.execute(query).fetchall() == b.execute(query).fetchall()


def test_the_header_dimension_is_an_integer_and_old_string_headers_still_import(
    exported: tuple[Path, Path, list[dict[str, Any]]], tmp_path: Path, models_dir: Path
) -> None:
    _, _, records = exported
    header = records[0]
    assert header["model"]["dimension"] == 384  # an integer, not "384"
    old = [{**header, "model": {**header["model"], "dimension": "384"}}, *records[1:]]
    old_file = tmp_path / "old.jsonl"
    old_file.write_text("".join(json.dumps(r) + "\n" for r in old), encoding="utf-8")
    memories = sum(1 for r in records if r["kind"] == "memory")
    done = run_cli(tmp_path / "from-old", models_dir, "import", str(old_file))
    assert f"imported {memories} memories" in done.stderr


def test_export_of_one_namespace(
    exported: tuple[Path, Path, list[dict[str, Any]]], tmp_path: Path, models_dir: Path
) -> None:
    source, _, records = exported
    only = export_file(source, models_dir, tmp_path / "b.jsonl", "--namespace", "team-b")
    memories = [r for r in only if r["kind"] == "memory"]
    assert only[0]["namespace"] == "team-b"
    assert [m["id"] for m in memories] == [
        r["id"] for r in records if r["kind"] == "memory" and r["namespace"] == "team-b"
    ]
    assert all(r["namespace"] == "team-b" for r in only[1:])
    target = tmp_path / "only-b"
    run_cli(target, models_dir, "import", str(tmp_path / "b.jsonl"))
    with closing(sqlite3.connect(f"file:{target / 'ferrex.db'}?mode=ro", uri=True)) as conn:
        namespaces = dict(conn.execute("SELECT namespace, COUNT(*) FROM memories GROUP BY 1"))
    assert namespaces == {"team-b": len(memories)}


def test_an_empty_export_file_is_refused_like_one_without_a_header() -> None:
    from ferrex.core.errors import FerrexError
    from ferrex.core.ops.export_format import check_records

    for records in ([], [{"kind": "memory"}]):
        with pytest.raises(FerrexError) as info:
            check_records(records)
        assert "the header line is missing; nothing was imported" in info.value.message


def test_entity_records_with_malformed_aliases_are_rejected_before_any_write() -> None:
    from ferrex.core.errors import FerrexError
    from ferrex.core.ops.export_format import check_records

    header = {"kind": "header", "format": "ferrex-export", "version": 1}
    entity = {
        "kind": "entity",
        "id": 1,
        "namespace": "default",
        "name": "tokio",
        "display_name": "Tokio",
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
        "aliases": [
            {"alias": "tokio rs", "method": "fuzzy", "score": 0.9, "created_at": "2026-01-01"}
        ],
    }
    check_records([header, entity])  # well-formed: no error
    broken = {**entity, "aliases": [{"alias": "tokio rs"}]}
    with pytest.raises(FerrexError) as raised:
        check_records([header, broken])
    assert raised.value.code == "invalid_params"
    assert "line 2" in raised.value.message and "aliases.0.method" in raised.value.message
