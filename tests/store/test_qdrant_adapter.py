"""The qdrant-client adapter (``--qdrant-url``) on ``QdrantClient(":memory:")``: same schema, same
behaviour as the embedded engine (no Qdrant server binary exists in this environment)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from qdrant_client import QdrantClient, models
from tests.support.harness import ServiceFactory
from tests.support.parity import order_difference

from ferrex.server.calls import run_tool as invoke
from ferrex.server.calls import store_many
from ferrex.store.qdrant import COLLECTION, QdrantIndex

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MEMORIES = [
    {
        "content": "the api-server switched to tokio::sync::Semaphore to fix a pool deadlock",
        "timestamp": "2026-11-25T10:00:00Z",
        "entities": ["api-server", "tokio"],
    },
    {
        "content": "billing-service invoices were delayed by a stuck Stripe webhook (INC-2231)",
        "timestamp": "2026-11-26T10:00:00Z",
        "entities": ["billing-service", "stripe"],
    },
    {
        "content": "the dashboard team replaced Redux with Zustand for state management",
        "timestamp": "2026-11-27T10:00:00Z",
        "entities": ["dashboard"],
    },
    {"subject": "api-server", "predicate": "written_in", "object": "Rust"},
    {"subject": "billing-service", "predicate": "owned_by", "object": "the payments team"},
    {
        "type": "procedural",
        "name": "deploy-to-staging",
        "conditions": ["tests pass"],
        "steps": ["build the image", "push it to the registry", "apply the manifests"],
    },
]
QUERIES = [
    {"query": "INC-2231"},
    {"query": "what language is the api-server written in"},
    {"query": "how do we deploy", "types": ["procedural"]},
    {"query": "state management", "entities": ["dashboard"]},
    {"query": "what happened", "time_range": {"after": "2026-11-26T00:00:00Z"}},
]


def _contents(response: dict) -> list[str]:
    return [
        r.get("content") or f"{r['subject']} {r['predicate']} {r['object']}"
        for r in response["results"]
    ]


def test_collection_schema(make_service: ServiceFactory) -> None:
    client = QdrantClient(":memory:")
    service = make_service(clock=lambda: NOW, index=QdrantIndex(client, mode="local"))
    invoke(service, "store", MEMORIES[0])
    info = client.get_collection(COLLECTION)
    vectors = info.config.params.vectors
    assert isinstance(vectors, dict) and vectors["dense"].distance == models.Distance.COSINE
    assert vectors["dense"].size == 384
    sparse = info.config.params.sparse_vectors
    assert sparse is not None and sparse["bm25"].modifier == models.Modifier.IDF
    point = client.scroll(COLLECTION, limit=1, with_payload=True)[0][0]
    assert set(point.payload or {}) >= {
        "memory_id",
        "namespace",
        "type",
        "entities",
        "time",
        "t_invalid",
        "model",
    }


@pytest.mark.parametrize("late", [True, False])
def test_same_results_as_the_embedded_engine(make_service: ServiceFactory, late: bool) -> None:
    # The same pipeline on both engines, with the late-interaction channel (the default) and
    # without it. The two-channel evidence is the same to the last digit; the token vectors are
    # stored 8-bit by the embedded engine and float16 by a server: scores within 0.01.
    setting = {"retrieval.late_interaction.enabled": late}
    edge = make_service(clock=lambda: NOW, **setting)
    local = make_service(
        clock=lambda: NOW, index=QdrantIndex(QdrantClient(":memory:"), mode="local"), **setting
    )
    for service in (edge, local):
        stored = store_many(service, MEMORIES)
        assert all("error" not in s for s in stored)
    assert edge.index.late_interaction is late and local.index.late_interaction is late
    for query in QUERIES:
        a = invoke(edge, "recall", {**query, "limit": 5, "explain": True})
        b = invoke(local, "recall", {**query, "limit": 5, "explain": True})
        # Each store draws its own ids: results are named by their content.
        ranked = [
            [(c, r["score"]) for c, r in zip(_contents(x), x["results"], strict=True)]
            for x in (a, b)
        ]
        if not late:
            assert ranked[0] == ranked[1], query
            assert all("late" not in r["explain"] for r in b["results"])
            continue
        # A near tie may swap (tests/support/parity.py); each result's MaxSim within 0.01.
        assert order_difference(ranked[0], ranked[1]) is None, (query, ranked)
        late_of = [
            {c: r["explain"]["late"] for c, r in zip(_contents(x), x["results"], strict=True)}
            for x in (a, b)
        ]
        assert late_of[0].keys() == late_of[1].keys()
        assert all(abs(late_of[0][c] - late_of[1][c]) < 0.01 for c in late_of[0]), late_of


def test_supersede_forget_and_history_on_qdrant_client(make_service: ServiceFactory) -> None:
    client = QdrantClient(":memory:")
    service = make_service(clock=lambda: NOW, index=QdrantIndex(client, mode="local"))
    old = invoke(
        service, "store", {"subject": "api-server", "predicate": "uses", "object": "tokio 1.36"}
    )
    new = invoke(
        service,
        "store",
        {"subject": "api-server", "predicate": "depends-on", "object": "tokio 1.38"},
    )
    assert new["status"] == "superseded" and new["superseded"] == [old["id"]]
    current = invoke(service, "recall", {"query": "api-server tokio", "types": ["semantic"]})
    assert [r["id"] for r in current["results"]] == [new["id"]]
    history = invoke(
        service,
        "recall",
        {"query": "api-server tokio", "types": ["semantic"], "include_invalidated": True},
    )
    assert {r["id"] for r in history["results"]} == {old["id"], new["id"]}
    gone = invoke(service, "forget", {"ids": [new["id"]]})
    assert gone["deleted"] == [new["id"]]
    assert service.index.points_by_memory().keys() == {old["id"]}


@pytest.mark.parametrize("engine", ["edge", "qdrant-client"])
def test_time_range_finds_the_facts_valid_during_it(
    make_service: ServiceFactory, engine: str
) -> None:
    """Spec: temporal filters use t_valid / t_invalid for facts, and a historical query with a
    time range includes facts invalidated since. Events keep filtering on their own time."""
    index = QdrantIndex(QdrantClient(":memory:"), mode="local") if engine != "edge" else None
    service = make_service(clock=lambda: NOW, index=index)
    v1 = invoke(
        service,
        "store",
        {
            "subject": "api-server",
            "predicate": "runtime",
            "object": "node 16",
            "t_valid": "2026-01-01",
        },
    )["id"]
    v2 = invoke(
        service,
        "store",
        {
            "subject": "api-server",
            "predicate": "runtime",
            "object": "node 20",
            "t_valid": "2026-03-01",
        },
    )["id"]
    event = invoke(
        service,
        "store",
        {"content": "api-server runtime upgrade rehearsal", "timestamp": "2026-02-10T10:00:00Z"},
    )["id"]

    def ids(after: str | None, before: str | None) -> set[str]:
        window = {k: v for k, v in (("after", after), ("before", before)) if v}
        query = {"query": "api-server runtime", "time_range": window, "include_stale": True}
        answer = invoke(service, "recall", {**query, "limit": 10})
        return {r["id"] for r in answer["results"]}

    assert ids("2026-02-01", "2026-02-20") == {v1, event}  # v1 was valid then (superseded since)
    assert ids("2026-11-20", None) == {v2}  # valid since March: still valid in the last days
    assert ids(None, "2026-01-15") == {v1}
    assert ids("2026-02-15", "2026-03-15") == {v1, v2}  # the change happened inside the range
    assert ids("2026-03-01", None) == {v2}  # v1 ended exactly then: [t_valid, t_invalid)


@pytest.mark.parametrize("engine", ["edge", "qdrant-client"])
def test_dense_similarities_are_the_cosines_of_the_pinned_models_points(
    make_service: ServiceFactory, engine: str
) -> None:
    """What the context-neighbour gate reads, on both adapters: the cosine of each listed pair
    (the stored vectors' dot product, as the model embeds them), nothing for an unknown id or
    a point of another model."""
    import numpy as np

    index = QdrantIndex(QdrantClient(":memory:"), mode="local") if engine != "edge" else None
    service = make_service(clock=lambda: NOW, index=index)
    texts = [
        "Jon adopted a puppy from the animal shelter downtown",
        "Jon named the puppy Biscuit after the colour of her fur",
        "renew the car insurance before March",
        "the ledger service archives invoices to S3 nightly",
    ]
    ids = [s["id"] for s in store_many(service, [{"content": t} for t in texts])]
    vectors = service.embedder.embed_documents(texts)
    pin = service.embedder.info.pin
    others = {ids[0]: [ids[1], ids[2], "mem_unknown"], ids[1]: [ids[0]], "mem_unknown": [ids[0]]}
    found = service.index.dense_similarities(others, pin)
    assert set(found) == {(ids[0], ids[1]), (ids[0], ids[2]), (ids[1], ids[0])}
    for (a, b), cosine in found.items():
        expected = float(np.dot(vectors[ids.index(a)], vectors[ids.index(b)]))
        assert cosine == pytest.approx(expected, abs=1e-3)
    assert found[(ids[0], ids[1])] > 0.35 > found[(ids[0], ids[2])]  # same topic / another
    service.index.set_payload(ids[3], {"model": "some-other-model@768"})
    assert service.index.dense_similarities({ids[0]: [ids[3]]}, pin) == {}
    assert service.index.dense_similarities({ids[3]: [ids[0]]}, pin) == {}
    assert service.index.dense_similarities({}, pin) == {}
