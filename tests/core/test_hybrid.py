"""Hybrid retrieval proof (spec "Hybrid retrieval quality") and recall filters / ordering.

Over 20+ memories: one target is reachable only by an exact keyword (BM25), another only by
paraphrase (dense). The fused results hold both; each channel alone misses one of them.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from tests.support.harness import ServiceFactory

from ferrex.core.service import MemoryService
from ferrex.server.calls import run_tool as invoke
from ferrex.server.calls import store_many

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

KEYWORD_TARGET = (
    "Postmortem for ticket QZX-9071: a misconfigured nginx rate limiter rejected API calls"
)
PARAPHRASE_TARGET = (
    "the checkout became painfully slow for shoppers right after the holiday promotion went live"
)
DISTRACTORS = [
    "the website homepage got a new hero banner for the spring campaign",
    "customer support answered twice as many chats this week",
    "our online store added Apple Pay and Google Pay at checkout",
    "marketing planned a discount sale for existing customers in March",
    "the mobile app release 4.2 fixed a crash on older Android phones",
    "Grafana dashboards were reorganised by service owner",
    "the data team migrated nightly reports from cron to Airflow",
    "a customer asked for an invoice in Portuguese",
    "the design system gained a dark mode palette",
    "the warehouse scanner firmware was updated to version 7",
    "website traffic from search engines grew 12 percent in October",
    "sales asked for a report of customers who churned last quarter",
    "we renewed the TLS certificates for all public domains",
    "the office coffee machine was replaced after it broke",
    "the customer newsletter moved from Mailchimp to Buttondown",
    "load balancer health checks now probe /healthz every five seconds",
    "the blog post about our pricing page was published on Tuesday",
    "the QA team wrote end-to-end tests for the signup form",
    "shoppers can now save items in a wishlist on the website",
    "a discount code leaked on a coupon forum and was revoked",
    "the product team interviewed five customers about the sale experience",
    "the online shop felt slow to customers during the Black Friday promotion",
    "cart pages loaded slowly while the discount campaign ran",
    "customers complained that paying took ages during the spring offer",
    "the web store was laggy for shoppers when the autumn discount started",
    "during the promo weekend the payment form timed out for many users",
    "people shopping on the site during the clearance event saw long delays",
    "the storefront responded slowly under the flash-sale load",
]
# No word of the query except the ticket id occurs in any memory (after stemming/stopwords).
QUERY = "QZX-9071 purchasing was sluggish for buyers around the seasonal deal"


def _load(service: MemoryService) -> dict[str, str]:
    stored = store_many(
        service,
        [
            {"content": text, "timestamp": "2026-11-20T09:00:00Z"}
            for text in [KEYWORD_TARGET, PARAPHRASE_TARGET, *DISTRACTORS]
        ],
    )
    assert all("error" not in s for s in stored), stored
    return {"keyword": stored[0]["id"], "paraphrase": stored[1]["id"]}


def _ids(service: MemoryService, mode: str, limit: int = 5) -> list[str]:
    service.settings.retrieval.mode = mode  # type: ignore[assignment]
    service.cache.invalidate()
    return [r["id"] for r in invoke(service, "recall", {"query": QUERY, "limit": limit})["results"]]


def test_both_channels_contribute_to_fused_results(make_service: ServiceFactory) -> None:
    service = make_service(clock=lambda: NOW)
    targets = _load(service)
    assert len(DISTRACTORS) + 2 >= 20
    hybrid = _ids(service, "hybrid")
    dense = _ids(service, "dense")
    bm25 = _ids(service, "bm25")
    assert targets["keyword"] in hybrid and targets["paraphrase"] in hybrid
    assert targets["keyword"] not in dense and targets["paraphrase"] in dense
    assert targets["paraphrase"] not in bm25 and targets["keyword"] in bm25
    service.settings.retrieval.mode = "hybrid"
    explained = invoke(service, "recall", {"query": QUERY, "limit": 5, "explain": True})["results"]
    by_id = {r["id"]: r["explain"] for r in explained}
    assert by_id[targets["paraphrase"]]["bm25_rank"] is None
    assert by_id[targets["keyword"]]["bm25_rank"] == 1


# --------------------------------------------------------------------------- filters


@pytest.fixture
def loaded(make_service: ServiceFactory) -> tuple[MemoryService, dict[str, str]]:
    service = make_service(clock=lambda: NOW)
    ids = {}
    ids["e_tokio"] = invoke(
        service,
        "store",
        {
            "content": "switched the api-server pool to tokio::sync::Semaphore to fix a deadlock",
            "timestamp": "2026-11-02T10:00:00Z",
            "entities": ["api-server", "Tokio"],
        },
    )["id"]
    ids["e_billing"] = invoke(
        service,
        "store",
        {
            "content": "billing-service invoices were delayed by a stuck Stripe webhook",
            "timestamp": "2026-11-20T10:00:00Z",
            "entities": ["billing-service", "Stripe"],
        },
    )["id"]
    ids["s_tokio"] = invoke(
        service, "store", {"subject": "api-server", "predicate": "uses", "object": "tokio 1.38"}
    )["id"]
    ids["p_deploy"] = invoke(
        service,
        "store",
        {
            "type": "procedural",
            "name": "deploy-api-server",
            "entities": ["api-server"],
            "steps": ["run cargo test", "build the release image", "roll out with kubectl"],
        },
    )["id"]
    return service, ids


def test_types_filter(loaded: tuple[MemoryService, dict[str, str]]) -> None:
    service, ids = loaded
    result = invoke(
        service, "recall", {"query": "api-server tokio", "types": ["semantic"], "limit": 10}
    )
    assert [r["id"] for r in result["results"]] == [ids["s_tokio"]]
    result = invoke(
        service,
        "recall",
        {"query": "api-server tokio", "types": ["episodic", "procedural"], "limit": 10},
    )
    assert {r["type"] for r in result["results"]} <= {"episodic", "procedural"}
    assert ids["s_tokio"] not in [r["id"] for r in result["results"]]


def test_entities_filter_resolves_names(loaded: tuple[MemoryService, dict[str, str]]) -> None:
    service, ids = loaded
    for name in ("api-server", "API Server", "api_server"):
        result = invoke(
            service, "recall", {"query": "what happened", "entities": [name], "limit": 10}
        )
        assert {r["id"] for r in result["results"]} == {
            ids["e_tokio"],
            ids["s_tokio"],
            ids["p_deploy"],
        }
    result = invoke(
        service, "recall", {"query": "what happened", "entities": ["stripe"], "limit": 10}
    )
    assert [r["id"] for r in result["results"]] == [ids["e_billing"]]
    unknown = invoke(
        service,
        "recall",
        {"query": "what happened", "entities": ["kubernetes-operator"], "limit": 10},
    )
    assert unknown["results"] == [] and unknown["unresolved_entities"] == ["kubernetes-operator"]


def test_time_range_filter(loaded: tuple[MemoryService, dict[str, str]]) -> None:
    service, ids = loaded
    result = invoke(
        service,
        "recall",
        {
            "query": "incident",
            "types": ["episodic"],
            "limit": 10,
            "time_range": {"after": "2026-11-10T00:00:00Z"},
        },
    )
    assert [r["id"] for r in result["results"]] == [ids["e_billing"]]
    result = invoke(
        service,
        "recall",
        {
            "query": "incident",
            "types": ["episodic"],
            "limit": 10,
            "time_range": {"after": "2026-11-01", "before": "2026-11-03"},
        },
    )
    assert [r["id"] for r in result["results"]] == [ids["e_tokio"]]


def test_limit_and_deterministic_order(loaded: tuple[MemoryService, dict[str, str]]) -> None:
    service, _ = loaded
    first = invoke(service, "recall", {"query": "api-server", "limit": 2})
    assert len(first["results"]) == 2
    runs = [
        invoke(service, "recall", {"query": "api-server deadlock", "limit": 4}) for _ in range(5)
    ]
    service.cache.invalidate()
    runs.append(invoke(service, "recall", {"query": "api-server deadlock", "limit": 4}))
    orders = {tuple((r["id"], r["score"]) for r in run["results"]) for run in runs}
    assert len(orders) == 1


def test_points_of_another_model_are_never_compared(make_service: ServiceFactory) -> None:
    """Every vector carries its model; recall and dedup only compare points of the pinned model."""
    service = make_service(clock=lambda: NOW)
    kept = invoke(
        service, "store", {"content": "the ledger service stores invoices in PostgreSQL 16"}
    )["id"]
    alien = invoke(
        service, "store", {"content": "the ledger service archives invoices to S3 nightly"}
    )["id"]
    pin = service.embedder.info.pin
    assert {p for p in service.index.points_by_memory()} == {kept, alien}
    service.index.set_payload(alien, {"model": "some-other-model@768"})  # as if from another model
    service.cache.invalidate()
    ids = [
        r["id"]
        for r in invoke(service, "recall", {"query": "ledger service invoices", "limit": 10})[
            "results"
        ]
    ]
    assert ids == [kept]
    # and a near-duplicate of the alien memory is not rejected against it
    again = invoke(
        service, "store", {"content": "the ledger service archives invoices to S3 nightly"}
    )
    assert again["status"] == "stored"
    assert pin.startswith("sentence-transformers/all-MiniLM-L6-v2")


# ------------------------------------------------------------------ dated BM25 documents

DIARY = [
    ("2023-05-08T10:00:00Z", "went hiking with Melanie and her kids near the lake"),
    ("2023-10-13T10:00:00Z", "went hiking with Caroline and the dog along the river"),
    ("2024-02-02T10:00:00Z", "went hiking alone up the hill behind the house"),
]


def test_sparse_text_dates_episodic_memories_only() -> None:
    from ferrex.core.index.points import sparse_text
    from ferrex.core.memory import MemoryType

    class Fake:  # the two attributes sparse_text reads; not a store or model double
        def __init__(self, kind: MemoryType) -> None:
            self.type = kind
            self.event_time = datetime(2023, 5, 8, 23, 59, tzinfo=UTC)

    dated = "datemay date2023 datemay2023 text"
    assert sparse_text(Fake(MemoryType.EPISODIC), "text") == dated  # type: ignore[arg-type]
    assert sparse_text(Fake(MemoryType.SEMANTIC), "text") == "text"  # type: ignore[arg-type]
    assert sparse_text(Fake(MemoryType.PROCEDURAL), "text") == "text"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("query", "terms"),
    [
        ("what happened in May 2023?", "datemay date2023 datemay2023"),
        ("where did I go hiking in May?", "datemay"),
        ("the week before 9 June 2023", "datejune date2023 datejune2023"),
        ("plans for Sept", ""),  # no context: an abbreviation alone is not a date
        ("since Sept 2022", "dateseptember date2022 dateseptember2022"),
        ("October", "dateoctober"),
        ("what may cause the outage?", ""),
        ("this may be wrong", ""),
        ("upgrade to python 3.9 and node 18", ""),
        ("Jan said the mar tool is broken", ""),
        ("released 1899 or 2100?", ""),
        ("in 2021 and again in 2021", "date2021"),
    ],
)
def test_query_date_terms(query: str, terms: str) -> None:
    from ferrex.core.index.date_terms import query_terms

    assert query_terms(query) == terms


@pytest.mark.parametrize(
    ("query", "expected"),
    [("hiking in October 2023", 1), ("where did I go hiking in May?", 0), ("hiking 2024", 2)],
)
def test_a_named_month_or_year_finds_the_episode_by_its_date(
    make_service: ServiceFactory, query: str, expected: int
) -> None:
    """The event date is indexed as BM25 words: a query naming the period ranks that episode
    first, while the returned content stays exactly as stored (no date words added)."""
    service = make_service(clock=lambda: NOW)
    stored = store_many(service, [{"content": c, "timestamp": t} for t, c in DIARY])
    assert all("error" not in s for s in stored), stored
    results = invoke(service, "recall", {"query": query, "limit": 3, "include_stale": True})[
        "results"
    ]
    assert results[0]["id"] == stored[expected]["id"]
    assert {r["content"] for r in results} == {c for _, c in DIARY}


def test_the_verb_may_does_not_match_may_episodes(make_service: ServiceFactory) -> None:
    service = make_service(clock=lambda: NOW)
    stored = store_many(
        service,
        [
            {"content": "lunch with Bob at the noodle bar", "timestamp": "2023-05-08T12:00:00Z"},
            {
                "content": "the outage was caused by a full disk",
                "timestamp": "2023-10-13T12:00:00Z",
            },
        ],
    )
    query = {"query": "what may cause the outage?", "limit": 2, "include_stale": True}
    results = invoke(service, "recall", query)["results"]
    assert results[0]["id"] == stored[1]["id"]
    explained = invoke(service, "recall", {**query, "explain": True})["results"]
    lunch = next(r for r in explained if r["id"] == stored[0]["id"])
    assert lunch["explain"]["bm25_rank"] is None  # no lexical match at all


def test_explain_shows_the_bm25_channel_rank_and_whether_the_floor_dropped_it(
    make_service: ServiceFactory,
) -> None:
    """``bm25_rank`` is the channel's own rank; a memory under the relative BM25 floor says so
    (it was ranked, but not counted in the fused score)."""
    service = make_service(clock=lambda: NOW)
    target = invoke(
        service, "store", {"content": "a quokka was seen in the community garden at dawn"}
    )
    notes = [
        invoke(service, "store", {"content": f"garden note {i}: watered the {plant} bed"})["id"]
        for i, plant in enumerate(["tomato", "bean", "pumpkin", "carrot", "onion", "leek"])
    ]
    query = {"query": "quokka garden", "limit": 10, "explain": True}
    explained = {r["id"]: r["explain"] for r in invoke(service, "recall", query)["results"]}
    assert explained[target["id"]]["bm25_rank"] == 1
    assert "bm25_below_floor" not in explained[target["id"]]
    floored = [explained[n] for n in notes if n in explained]
    assert floored, explained
    for entry in floored:
        assert entry["bm25_rank"] is not None and entry["bm25_rank"] > 1
        assert entry["bm25_below_floor"] is True


def test_a_score_does_not_depend_on_stale_memories_held_back(make_service: ServiceFactory) -> None:
    """Without a reranker the base score is the memory's own relevance (its evidence, not its
    rank), so include_stale changes which memories are shown, not their scores."""
    clock = {"now": datetime(2024, 1, 1, tzinfo=UTC)}
    service = make_service(clock=lambda: clock["now"])
    old = invoke(service, "store", {"content": "the deploy pipeline failed on the lint step"})
    clock["now"] = NOW
    fresh = invoke(service, "store", {"content": "the deploy pipeline failed on the test step"})
    hidden = invoke(service, "recall", {"query": "deploy pipeline failed lint", "explain": True})
    shown = invoke(
        service,
        "recall",
        {"query": "deploy pipeline failed lint", "explain": True, "include_stale": True},
    )
    assert hidden.get("stale_held_back", 0) == 1
    assert {r["id"] for r in shown["results"]} == {old["id"], fresh["id"]}
    [result] = hidden["results"]
    assert result["id"] == fresh["id"]
    assert result["explain"]["base_score"] == result["explain"]["relevance"]
    assert result["score"] == next(r["score"] for r in shown["results"] if r["id"] == fresh["id"])


def test_bm25_ranks_the_month_of_that_year_first(make_service: ServiceFactory) -> None:
    """For "March 2024" BM25 ranks the event of March 2024 first, ahead of an event whose text
    says 2024 (January) and of the March of another year. (The dense channel prefers the text
    with "2024" in it, so in this four-memory store the fused order is a tie between them.)"""
    service = make_service(clock=lambda: NOW)
    stored = store_many(
        service,
        [
            {
                "content": "project kickoff on 2024-01-08 with the whole team",
                "timestamp": "2024-01-08T10:00:00Z",
            },
            {"content": "the payments outage hit checkout", "timestamp": "2024-03-14T10:00:00Z"},
            {"content": "the search outage hit the catalog", "timestamp": "2023-03-20T10:00:00Z"},
            {"content": "a quiet release of the mobile app", "timestamp": "2024-06-02T10:00:00Z"},
        ],
    )
    for query in ("what happened in March 2024", "March 2024"):
        arguments = {"query": query, "limit": 4, "include_stale": True, "explain": True}
        results = invoke(service, "recall", arguments)["results"]
        by_id = {r["id"]: r["explain"] for r in results}
        assert by_id[stored[1]["id"]]["bm25_rank"] == 1, (query, by_id)
        assert stored[1]["id"] in [r["id"] for r in results[:2]]


def test_known_candidates_are_selected_by_point_id_or_memory_id(
    make_service: ServiceFactory,
) -> None:
    """The evidence lookups' filter: ``point_ids`` names single points, ``memory_ids`` every
    point of a memory; given both, either selects (and nothing else is scored)."""
    from dataclasses import replace as with_fields

    from ferrex.core.ids import point_id
    from ferrex.core.ports import IndexFilter, SparseVec

    service = make_service(clock=lambda: NOW)
    ids = [
        invoke(service, "store", {"content": text})["id"]
        for text in (
            "the ledger service stores invoices in PostgreSQL 16",
            "the billing team moved the cron jobs to Kubernetes",
            "payments run on the arm runners since March",
        )
    ]
    vector = service.embedder.embed_query("where are invoices stored?")
    base = IndexFilter(namespace="default", model=service.embedder.info.pin)

    def found(flt: IndexFilter) -> set[str]:
        hits = service.index.search_batch(vector, SparseVec((), ()), [("dense", flt, 10)], 64)[0]
        assert all(hit.memory_type == "episodic" for hit in hits)
        return {hit.memory_id for hit in hits}

    assert found(base) == set(ids)
    assert found(with_fields(base, point_ids=(point_id(ids[0]),))) == {ids[0]}
    assert found(with_fields(base, memory_ids=(ids[1],))) == {ids[1]}
    both = with_fields(base, memory_ids=(ids[1],), point_ids=(point_id(ids[2]),))
    assert found(both) == {ids[1], ids[2]}
