"""Context neighbours read the cosines of stored pairs from SQLite, recorded when the later of two
neighbours is written, and ask the index only for pairs nobody recorded; the answers are the
ones the index alone gives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.conftest import ServiceFactory

from ferrex.core.neighbours import pair_cosines
from ferrex.server.calls import run_tool, store_many

TURNS = [
    "Jon: I finally adopted a puppy last weekend!",
    "Gina: No way! Where did you get him from?",
    "Jon: From the Riverside animal shelter, they were lovely.",
    "Gina: Riverside is where I volunteered in college.",
    "Jon: His name is Biscuit and he sleeps all day.",
]
OTHER = "Reminder: the quarterly tax filing is due on April 15."
START = datetime(2026, 3, 1, 12, tzinfo=UTC)


def _stored(service: Any, texts: list[str], namespace: str = "default") -> list[str]:
    ids = []
    for n, text in enumerate(texts):
        at = (START + timedelta(minutes=n)).isoformat()
        answer = run_tool(
            service, "store", {"content": text, "timestamp": at, "namespace": namespace}
        )
        assert "error" not in answer, answer
        ids.append(answer["id"])
    return ids


def _recorded(service: Any) -> dict[tuple[str, str], float]:
    rows = service.meta._q("SELECT a, b, model, cosine FROM neighbour_cosines")
    assert {row["model"] for row in rows} <= {service.embedder.info.pin}
    return {(row["a"], row["b"]): row["cosine"] for row in rows}


def test_stores_record_the_cosines_of_each_memory_and_its_stored_neighbours(
    make_service: ServiceFactory,
) -> None:
    service = make_service()
    ids = _stored(service, TURNS)
    other = _stored(service, [OTHER], namespace="elsewhere")[0]
    recorded = _recorded(service)
    window = service.settings.retrieval.neighbours.window
    pairs = {
        tuple(sorted((ids[i], ids[j])))
        for i in range(len(ids))
        for j in range(i + 1, min(len(ids), i + window + 1))
    }
    # Every pair within the window, nothing across namespaces or past the window.
    assert set(recorded) == pairs
    assert all(other not in pair for pair in recorded)
    # The index's own cosines (what a recall asked it for before).
    asked: dict[str, list[str]] = {}
    for a, b in recorded:
        asked.setdefault(a, []).append(b)
    truth = service.index.dense_similarities(asked, service.embedder.info.pin)
    for (a, b), cosine in recorded.items():
        assert abs(cosine - truth[(a, b)]) < 1e-6


def test_a_bulk_import_records_them_too(make_service: ServiceFactory) -> None:
    service = make_service()
    items = [
        {"content": text, "timestamp": (START + timedelta(minutes=n)).isoformat()}
        for n, text in enumerate(TURNS)
    ]
    results = store_many(service, items)
    ids = [r["id"] for r in results]
    assert len(_recorded(service)) == 2 * len(ids) - 3  # window 2: n-1 + n-2 pairs
    assert tuple(sorted(ids[:2])) in _recorded(service)


def test_recall_uses_recorded_cosines_and_asks_the_index_only_for_the_rest(
    make_service: ServiceFactory,
) -> None:
    service = make_service()
    ids = _stored(service, TURNS)
    asked: list[dict[str, Any]] = []
    real = service.index.dense_similarities

    def counting(others: Any, model: str) -> Any:
        asked.append({m: list(o) for m, o in others.items()})
        return real(others, model)

    service.index.dense_similarities = counting  # type: ignore[method-assign]
    question = {"query": "Where did Jon adopt the puppy from?", "limit": 5, "explain": True}
    answer = run_tool(service, "recall", question)
    assert answer["results"], answer
    assert asked == []  # every pair of this store was recorded

    # The same answer from the index alone (as a store written before the recording).
    service.meta._x("DELETE FROM neighbour_cosines")
    service.cache.invalidate()
    again = run_tool(service, "recall", question)
    assert asked, "the pairs nobody recorded come from the index"
    assert [(r["id"], r["score"]) for r in again["results"]] == [
        (r["id"], r["score"]) for r in answer["results"]
    ]

    # Forgetting a memory drops its pairs; the two it separated are now adjacent, and their
    # cosine (not recorded) comes from the index.
    service = make_service()
    ids = _stored(service, TURNS)
    assert "error" not in run_tool(service, "forget", {"ids": [ids[2]]})
    assert all(ids[2] not in pair for pair in _recorded(service))
    model = service.embedder.info.pin
    found = pair_cosines(service.meta, service.index, {ids[1]: [ids[3], ids[4]]}, model)
    truth = service.index.dense_similarities({ids[1]: [ids[3], ids[4]]}, model)
    assert found.keys() >= truth.keys() and truth
    for pair, cosine in truth.items():
        assert abs(found[pair] - cosine) < 1e-6
