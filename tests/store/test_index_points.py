"""The embedded index asks the engine for no payload: what a found point is (its memory, chunk
and type) comes from what the adapter has learned of it, or from one retrieve of the points it
has not seen. Answers must not depend on what it has learned: cold, warm, after forgetting,
with a store rewritten in place, and with the table too small for one answer."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from tests.support.harness import ServiceFactory

import ferrex.store.edge as edge
from ferrex.core.ops.rebuild import rebuild
from ferrex.core.ports import IndexFilter
from ferrex.core.service import MemoryService
from ferrex.server.calls import run_tool as invoke
from ferrex.server.calls import store_many

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MEMORIES: list[dict[str, Any]] = [
    {"content": "the api-server moved to tokio 1.38 after a deadlock", "entities": ["tokio"]},
    {"content": "billing-service invoices were delayed by a stuck Stripe webhook (INC-2231)"},
    {"content": "the dashboard team replaced Redux with Zustand for state management"},
    {"subject": "api-server", "predicate": "written_in", "object": "Rust"},
    {
        "type": "procedural",
        "name": "deploy-to-staging",
        # Long enough for a point per step: its hits are chunks of one memory.
        "steps": [f"step {n}: " + "run the staging checks carefully " * 12 for n in range(6)],
    },
]
QUERIES = ["INC-2231 webhook", "what language is the api-server written in", "deploy to staging"]


def answers(service: MemoryService) -> list[list[tuple[str, float, str]]]:
    out = []
    for query in QUERIES:
        service.cache.invalidate()
        found = invoke(service, "recall", {"query": query, "limit": 5})
        out.append([(r["id"], r["score"], r["type"]) for r in found["results"]])
    return out


def test_answers_do_not_depend_on_what_the_index_has_learned(
    make_service: ServiceFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = make_service(clock=lambda: NOW)
    stored = store_many(service, MEMORIES)
    assert all(r.get("status") == "stored" for r in stored), stored
    index = service.index
    assert isinstance(index, edge.EdgeIndex)
    procedure = stored[-1]["id"]
    assert len(index.points_by_memory()[procedure]) > 1  # chunked: several points

    cold = answers(service)
    assert len(index._known) > 0  # learned from what was found
    assert answers(service) == cold  # warm
    assert cold[2] and cold[2][0][0] == procedure and cold[2][0][2] == "procedural"

    # Every hit the adapter returns names its memory, chunk and type, learned or not.
    truth = {pid: mid for mid, pids in index.points_by_memory().items() for pid in pids}
    index._known.clear()
    monkeypatch.setattr(edge, "_KNOWN_POINTS", 2)  # forgets half of itself on every search
    vector = service.embedder.embed_query("deploy to staging")
    flt = IndexFilter(namespace="default", model=service.embedder.info.pin)
    for _ in range(3):  # cold, then with a table that cannot hold one answer
        hits = index.dense_search(vector, flt, 20, 64)
        assert len(hits) == len(truth)
        assert all(hit.memory_id == truth[hit.point_id] and hit.memory_type for hit in hits)
        assert {hit.chunk for hit in hits if hit.memory_id == procedure} == set(range(6))
    assert answers(service) == cold
    monkeypatch.undo()

    # A forgotten memory's points leave the table, and it is not found again.
    webhook = cold[0][0][0]
    assert any(known[1] == webhook for known in index._known.values())  # it was known
    invoke(service, "forget", {"ids": [webhook]})
    # Keyed by the id object the engine returns (a UUID), the point id string beside it.
    assert all(
        isinstance(key, uuid.UUID) and str(key) == known[0] for key, known in index._known.items()
    )
    assert all(known[1] != webhook for known in index._known.values())
    after = answers(service)
    assert webhook not in {mid for page in after for mid, _, _ in page}
    assert after[2][0][0] == procedure  # (scores move: the store holds one memory fewer)


def test_a_rewritten_point_is_learned_again(make_service: ServiceFactory) -> None:
    """A store rebuilt (rebuild-index: the index recreated from SQLite) keeps its point ids:
    what the index learned of them is dropped with it and learned again, unchanged."""
    service = make_service(clock=lambda: NOW)
    store_many(service, MEMORIES)
    before = answers(service)
    index = service.index
    assert isinstance(index, edge.EdgeIndex)
    learned = dict(index._known)
    rebuild(service)
    assert answers(service) == before
    assert all(index._known.get(pid, known) == known for pid, known in learned.items())
