"""The forget tool (spec "forget"; issue 5).

Proves: forgotten ids disappear from SQLite AND the vector index (every chunk point), and from
recall; unknown ids (and ids of another namespace) come back in ``not_found`` without failing
the call; ``cascade`` also removes the entities that only the forgotten memories referenced,
while shared entities (and everything without ``cascade``) stay; each deletion is audited; and
a process killed in the middle of a forget leaves no orphan on either side once reopened.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.support.answers import conforms
from tests.support.paths import ROOT

from ferrex.core.service import PHASE_AFTER_COMMIT, PHASE_BEFORE_COMMIT, MemoryService
from ferrex.server.calls import run_tool as invoke

ServiceFactory = Callable[..., MemoryService]
UNKNOWN = "mem_000000000000deadbeef"


def stored_ids(service: MemoryService, *items: dict[str, object]) -> list[str]:
    return [str(invoke(service, "store", item)["id"]) for item in items]


def long_procedure() -> dict[str, object]:
    steps = [
        f"step {n}: check the {word} dashboard, compare the error budget with last week's "
        f"baseline and write the {word} findings into the incident channel before moving on"
        for n, word in enumerate(
            [
                "billing",
                "search",
                "checkout",
                "payments",
                "ledger",
                "email",
                "mobile",
                "auth",
                "export",
                "import",
                "reports",
                "alerts",
                "webhooks",
                "uploads",
                "sessions",
                "metrics",
                "tracing",
                "queues",
                "cron",
                "backups",
            ]
        )
    ]
    return {"type": "procedural", "name": "weekly-health-review", "steps": steps}


def test_forget_removes_memories_from_sqlite_and_every_index_point(
    service: MemoryService,
) -> None:
    procedure = invoke(service, "store", long_procedure())
    assert service.meta.get_memory(procedure["id"]).chunk_count > 1  # several vector points
    episode, keep = stored_ids(
        service,
        {"content": "the weekly health review found a slow query in the ledger"},
        {"content": "the ledger team added an index on posted_at"},
    )
    points = service.index.points_by_memory()
    assert len(points[procedure["id"]]) == service.meta.get_memory(procedure["id"]).chunk_count

    answer = invoke(service, "forget", {"ids": [procedure["id"], episode]})
    assert answer["deleted"] == [procedure["id"], episode]
    assert answer["not_found"] == []

    assert not service.meta.existing_ids([procedure["id"], episode])
    points = service.index.points_by_memory()
    assert procedure["id"] not in points and episode not in points
    assert keep in points
    assert service.meta.journal_backlog() == 0
    found = invoke(service, "recall", {"query": "weekly health review ledger", "limit": 10})
    assert [r["id"] for r in found["results"]] == [keep]
    audited = {e["memory_id"] for e in service.meta.audit_entries("default", "forget")}
    assert audited == {procedure["id"], episode}


def test_unknown_ids_are_reported_and_not_fatal(service: MemoryService) -> None:
    [memory_id] = stored_ids(service, {"content": "the VPN certificate expires in March"})
    answer = invoke(service, "forget", {"ids": [memory_id, UNKNOWN, memory_id]})
    assert answer["deleted"] == [memory_id]
    assert answer["not_found"] == [UNKNOWN]
    again = invoke(service, "forget", {"ids": [memory_id]})
    assert again["deleted"] == [] and again["not_found"] == [memory_id]


def test_forget_only_touches_its_namespace(service: MemoryService) -> None:
    [other] = stored_ids(
        service, {"content": "the design team prefers Figma", "namespace": "design"}
    )
    assert invoke(service, "forget", {"ids": [other]})["not_found"] == [other]
    assert service.meta.memory_exists(other)
    assert invoke(service, "forget", {"ids": [other], "namespace": "design"})["deleted"] == [other]
    assert not service.meta.memory_exists(other)


def entity_names(service: MemoryService, namespace: str = "default") -> set[str]:
    return {row["display_name"] for row in service.meta.entities_of_namespace(namespace)}


def test_cascade_removes_entities_only_the_forgotten_memories_referenced(
    service: MemoryService,
) -> None:
    gone, kept = stored_ids(
        service,
        {
            "content": "Grafana alerting paged the on-call for the payments outage",
            "entities": ["grafana", "payments"],
        },
        {
            "content": "the payments service moved to the new Kafka cluster",
            "entities": ["payments", "kafka"],
        },
    )
    [fact] = stored_ids(
        service, {"subject": "loki", "predicate": "stores", "object": "thirty days of logs"}
    )
    assert {"grafana", "payments", "kafka", "loki"} <= entity_names(service)

    answer = invoke(service, "forget", {"ids": [gone, fact], "cascade": True})
    assert answer["deleted"] == [gone, fact]
    assert answer["entities_removed"] == ["grafana", "loki"]
    names = entity_names(service)
    assert "grafana" not in names and "loki" not in names
    assert {"payments", "kafka"} <= names  # still referenced by the memory that stays
    still = invoke(service, "recall", {"query": "payments", "entities": ["payments"]})
    assert [r["id"] for r in still["results"]] == [kept]
    lost = invoke(service, "recall", {"query": "grafana alerting", "entities": ["grafana"]})
    assert lost["results"] == [] and lost["unresolved_entities"] == ["grafana"]


def test_without_cascade_entities_stay(service: MemoryService) -> None:
    [memory_id] = stored_ids(
        service, {"content": "Jenkins built the release branch", "entities": ["jenkins"]}
    )
    answer = invoke(service, "forget", {"ids": [memory_id]})
    assert "entities_removed" not in answer  # none
    assert "jenkins" in entity_names(service)
    inactive = conforms("reflect", invoke(service, "reflect", {}))["inactive_entities"]
    assert [(e["name"], e["memories"]) for e in inactive] == [("jenkins", 0)]


# --------------------------------------------------------------------------- crash safety

CRASHING_FORGET = """
import sys
from pathlib import Path
from tests.support.harness import make_settings
from ferrex.core.service import MemoryService
from ferrex.embed.bm25 import Bm25Encoder
from ferrex.embed.embedder import FastEmbedEmbedder
from ferrex.embed.reranker import FastEmbedReranker
from ferrex.store.edge import EdgeIndex
from ferrex.store.sqlite import SqliteStore
from ferrex.server.calls import run_tool as invoke

data, models, memory_id = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
settings = make_settings(data, models)
embedder = FastEmbedEmbedder("small", models, offline=True, allow_bundled=True,
                             prefer_bundled=True)
service = MemoryService(settings, SqliteStore(settings.db_path), EdgeIndex(settings.index_path),
                        embedder, Bm25Encoder(),
                        FastEmbedReranker("default", models, enabled=False, offline=True))
service.ensure_ready()
invoke(service, "forget", {"ids": [memory_id], "cascade": True})
"""


def run_until_paused(data: Path, models_dir: Path, memory_id: str, phase: str) -> None:
    """Run a forget in another process, paused at ``phase``, and kill it there (SIGKILL)."""
    marker = data.parent / f"paused-{phase}"
    env = dict(os.environ, FERREX_TEST_PAUSE_AT=phase, FERREX_TEST_PAUSE_FILE=str(marker))
    process = subprocess.Popen(
        [sys.executable, "-c", CRASHING_FORGET, str(data), str(models_dir), memory_id],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert process.poll() is None, process.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the forget never reached the pause point"
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        assert process.stderr is not None
        process.stderr.close()


@pytest.mark.parametrize(
    ("phase", "survives"), [(PHASE_BEFORE_COMMIT, True), (PHASE_AFTER_COMMIT, False)]
)
def test_a_forget_killed_midway_leaves_no_orphan(
    make_service: ServiceFactory, models_dir: Path, tmp_path: Path, phase: str, survives: bool
) -> None:
    data = tmp_path / "crash"
    first = make_service(data)
    victim, bystander = stored_ids(
        first,
        {"content": "the staging database password was rotated", "entities": ["postgres"]},
        {"content": "the staging cluster got two more nodes", "entities": ["kubernetes"]},
    )
    first.close()

    run_until_paused(data, models_dir, victim, phase)

    reopened = make_service(data)
    reopened.ensure_ready()  # replays the journal
    points = reopened.index.points_by_memory()
    assert reopened.meta.memory_exists(victim) is survives
    assert (victim in points) is survives  # SQLite and the index agree either way
    assert reopened.meta.memory_exists(bystander) and bystander in points
    assert ("postgres" in entity_names(reopened)) is survives  # the cascade commits with it
    assert "kubernetes" in entity_names(reopened)
    assert reopened.meta.journal_backlog() == 0
    if survives:  # the forget can simply be retried
        assert invoke(reopened, "forget", {"ids": [victim]})["deleted"] == [victim]
        assert victim not in reopened.index.points_by_memory()


def test_forgetting_the_current_fact_says_which_history_has_no_successor(
    service: MemoryService,
) -> None:
    old = invoke(
        service, "store", {"subject": "billing-api", "predicate": "runs", "object": "postgres 14"}
    )
    new = invoke(
        service, "store", {"subject": "billing-api", "predicate": "runs", "object": "postgres 16"}
    )
    assert new["superseded"] == [old["id"]]
    answer = invoke(service, "forget", {"ids": [new["id"]]})
    assert answer["deleted"] == [new["id"]]
    assert answer["history_without_successor"] == [old["id"]]
    assert "no current value" in answer["note"]
    plain = invoke(service, "forget", {"ids": [old["id"]]})
    assert "history_without_successor" not in plain and "note" not in plain


def test_forgetting_the_successor_clears_the_older_facts_superseded_by(
    service: MemoryService,
) -> None:
    old = invoke(
        service, "store", {"subject": "billing-api", "predicate": "runs", "object": "postgres 14"}
    )
    new = invoke(
        service, "store", {"subject": "billing-api", "predicate": "runs", "object": "postgres 16"}
    )
    query = {"query": "billing-api runs postgres", "include_invalidated": True, "limit": 5}
    [before] = [r for r in invoke(service, "recall", query)["results"] if r["id"] == old["id"]]
    assert before["superseded_by"] == new["id"]
    invoke(service, "forget", {"ids": [new["id"]]})
    [after] = [r for r in invoke(service, "recall", query)["results"] if r["id"] == old["id"]]
    assert after.get("superseded_by") is None
    stored = service.meta.get_memory(old["id"])
    assert stored is not None and stored.superseded_by is None


def test_forgetting_a_middle_value_of_a_chain_leaves_no_false_alarm(service: MemoryService) -> None:
    v1 = invoke(service, "store", {"subject": "web", "predicate": "runs", "object": "node 16"})
    v2 = invoke(service, "store", {"subject": "web", "predicate": "runs", "object": "node 18"})
    v3 = invoke(service, "store", {"subject": "web", "predicate": "runs", "object": "node 20"})
    assert v2["superseded"] == [v1["id"]] and v3["superseded"] == [v2["id"]]
    answer = invoke(service, "forget", {"ids": [v2["id"]]})
    assert answer["deleted"] == [v2["id"]] and "history_without_successor" not in answer
