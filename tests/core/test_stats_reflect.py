"""The stats and reflect tools (spec "stats", "reflect", Layer 5 "Staleness audit via reflect").

Proves: brief and detailed stats have the shapes of the spec's two JSON examples (keys and
types); the ``needs_attention`` numbers are real (stale, conflicting and unvalidated memories
created on purpose are counted, and nothing else) and always agree with reflect's review list
(``stale_count + unvalidated_count == needs_review_total``, a confirmed old event included);
the brief answer stays under 300 model tokens for a store of 10,000 memories; reflect surfaces
stale and unvalidated memories with reasons (a fact's confidence only when it decayed from above
0.5 to below it), contradiction alerts, the lowest-access memories as forget candidates, entity
alias candidates and inactive entities, and a confirmation takes a memory off the review list.
Memories are aged by moving the clock (age counts from creation, not from an event's timestamp).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.support.answers import conforms
from tests.support.clock import MovableClock
from tests.support.spec import SPEC_DETAILED_KEYS
from tests.support.typed import stored

from ferrex.core.service import MemoryService
from ferrex.embed.reranker import FastEmbedReranker
from ferrex.server.calls import run_tool as invoke
from ferrex.server.calls import store_many

NOW = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
ServiceFactory = Callable[..., MemoryService]


def store(service: MemoryService, **arguments: Any) -> str:
    result = invoke(service, "store", arguments)
    assert result["status"] in {"stored", "superseded", "contradiction"}, result
    return str(result["id"])


def build_attention_store(service: MemoryService, clock: MovableClock) -> dict[str, str]:
    """A store with known numbers: 2 stale, 3 unvalidated, 1 conflict (see the comments).

    Built over 200 days of the clock; "now" is the end (NOW + 150 days)."""
    ids: dict[str, str] = {}
    clock.current = NOW - timedelta(days=50)  # 200 days before the end
    ids["stale_200"] = store(service, content="the old wiki was exported to markdown")
    clock.advance(50)  # end - 150
    ids["confirmed_long_ago"] = store(
        service, subject="billing", predicate="owned_by", object="team atlas"
    )
    clock.advance(30)  # end - 120
    ids["stale_120"] = store(service, content="a fan failed in rack 12 and was replaced")
    clock.advance(20)  # end - 100
    invoke(service, "reflect", {"confirm_ids": [ids["confirmed_long_ago"]]})
    ids["never_confirmed"] = store(
        service, subject="search", predicate="built_with", object="opensearch"
    )
    # At the end: two facts last confirmed (or stored) 100 days ago -> aging and unvalidated.
    clock.advance(20)  # end - 80
    ids["aging_80_cited"] = store(service, content="we benchmarked the ledger at 9k writes/s")
    clock.advance(35)  # end - 45
    ids["aging_45"] = store(
        service, content="the mobile team adopted Kotlin Multiplatform"
    )  # aging, never validated
    clock.advance(44)  # end - 1
    ids["fresh"] = store(service, content="Priya joined the platform team on Monday")
    clock.advance(1)  # the end: NOW + 150 days
    ids["citing"] = store(
        service,
        subject="ledger",
        predicate="handles",
        object="9k writes/s",
        source=f"memory:{ids['aging_80_cited']}",
    )  # validates the episode
    ids["db_current"] = store(
        service, subject="payments", predicate="database", object="postgres 16", confidence=0.9
    )
    ids["db_contested"] = store(
        service, subject="payments", predicate="database", object="mysql 8", confidence=0.6
    )  # a contradiction
    ids["old_cache"] = store(service, subject="sessions", predicate="stored_in", object="redis 6")
    store(service, subject="sessions", predicate="stored_in", object="redis 7")  # supersedes
    ids["runbook"] = store(
        service,
        type="procedural",
        name="failover-db",
        steps=["promote the replica", "repoint the pgbouncer"],
    )
    return ids


@pytest.fixture
def clock() -> MovableClock:
    return MovableClock(NOW)


@pytest.fixture
def attention(
    make_service: ServiceFactory, clock: MovableClock
) -> tuple[MemoryService, dict[str, str]]:
    service = make_service(clock=clock)
    return service, build_attention_store(service, clock)


def check_recent(recent: Any, limit: int = 5) -> None:
    assert isinstance(recent, list) and 0 < len(recent) <= limit
    for item in recent:
        assert set(item) == {"id", "type", "summary", "age_days"}
        assert isinstance(item["id"], str) and item["id"].startswith("mem_")
        assert item["type"] in {"episodic", "semantic", "procedural"}
        assert isinstance(item["summary"], str) and item["summary"]
        assert isinstance(item["age_days"], int)


def check_needs_attention(block: Any) -> None:
    assert set(block) == {"stale_count", "conflict_count", "unvalidated_count"}
    assert all(isinstance(value, int) for value in block.values())


def test_brief_stats_shape_is_the_spec_example(
    attention: tuple[MemoryService, dict[str, str]],
) -> None:
    service, _ = attention
    brief = invoke(service, "stats", {})
    assert set(brief) == {"total", "recent", "needs_attention"}
    assert isinstance(brief["total"], int) and brief["total"] == 13
    check_recent(brief["recent"])
    check_needs_attention(brief["needs_attention"])


def test_detailed_stats_shape_is_the_spec_example(
    attention: tuple[MemoryService, dict[str, str]],
) -> None:
    service, _ = attention
    detailed = conforms("stats", invoke(service, "stats", {"detailed": True}))
    assert set(detailed) >= SPEC_DETAILED_KEYS
    assert detailed["counts"] == {"episodic": 5, "semantic": 7, "procedural": 1}
    assert set(detailed["staleness"]) == {"fresh", "aging", "stale"}
    assert all(isinstance(v, int) for v in detailed["staleness"].values())
    # Every current memory has one level; the superseded fact is counted on its own.
    assert sum(detailed["staleness"].values()) + detailed["superseded"] == detailed["total"]
    assert detailed["total"] == sum(detailed["counts"].values())
    assert isinstance(detailed["conflicts"], int)
    assert detailed["entities"] == 5  # billing, search, ledger, payments, sessions
    assert isinstance(detailed["storage_mb"], float) and detailed["storage_mb"] > 0
    check_recent(detailed["recent"])
    check_needs_attention(detailed["needs_attention"])
    assert detailed["recent"] == invoke(service, "stats", {})["recent"]


def test_needs_attention_counts_are_real(
    attention: tuple[MemoryService, dict[str, str]],
) -> None:
    service, ids = attention
    brief = invoke(service, "stats", {})
    assert brief["needs_attention"] == {
        "stale_count": 2,  # the 120- and 200-day-old episodes
        "conflict_count": 1,  # payments database postgres 16 / mysql 8
        # the fact confirmed 100 days ago, the fact stored 100 days ago, the 45-day episode
        # (the 80-day episode was validated today by the fact citing it)
        "unvalidated_count": 3,
    }
    detailed = invoke(service, "stats", {"detailed": True})
    assert detailed["conflicts"] == 1
    assert detailed["staleness"] == {"fresh": 6, "aging": 4, "stale": 2}
    # Each fix is reflected at once.
    invoke(service, "reflect", {"confirm_ids": [ids["never_confirmed"], ids["confirmed_long_ago"]]})
    invoke(service, "forget", {"ids": [ids["stale_200"], ids["db_contested"]]})
    assert invoke(service, "stats", {})["needs_attention"] == {
        "stale_count": 1,
        "conflict_count": 0,
        "unvalidated_count": 1,
    }


def agree(service: MemoryService) -> dict[str, int]:
    """stats' needs_attention and reflect's review list count the same memories."""
    attention = invoke(service, "stats", {})["needs_attention"]
    total = invoke(service, "reflect", {"include_contradictions": False})["needs_review_total"]
    assert attention["stale_count"] + attention["unvalidated_count"] == total, (attention, total)
    return dict(attention)


def test_stats_and_reflect_agree_after_confirming_an_old_event(
    make_service: ServiceFactory, clock: MovableClock
) -> None:
    """An old event confirmed today is still stale by age (validation resets its validation
    half; its age keeps counting at weight 0.45), so it stays out of default recalls, but the
    agent has reviewed it: neither reflect's list nor stats' needs_attention counts it."""
    service = make_service(clock=clock)
    event = store(service, content="we held the first offsite in Porto")
    fact = store(service, subject="billing", predicate="owned_by", object="team atlas")
    clock.advance(200)
    assert agree(service) == {"stale_count": 2, "conflict_count": 0, "unvalidated_count": 0}
    answer = invoke(service, "reflect", {"confirm_ids": [event, fact]})
    assert answer["still_stale"] == [event] and answer["needs_review_total"] == 0
    assert agree(service) == {"stale_count": 0, "conflict_count": 0, "unvalidated_count": 0}
    assert invoke(service, "stats", {"detailed": True})["staleness"] == {
        "fresh": 1,
        "aging": 0,
        "stale": 1,
    }
    held = invoke(service, "recall", {"query": "offsite in Porto"})
    assert event not in [r["id"] for r in held["results"]] and held.get("stale_held_back", 0) == 1
    clock.advance(90)  # the confirmation is past the episodic fresh window: review it again
    assert agree(service)["stale_count"] == 1


def test_stats_and_reflect_agree_on_the_attention_store(
    attention: tuple[MemoryService, dict[str, str]], clock: MovableClock
) -> None:
    service, ids = attention
    assert agree(service)["stale_count"] == 2
    invoke(service, "reflect", {"confirm_ids": [ids["stale_120"], ids["aging_45"]]})
    assert agree(service) == {"stale_count": 1, "conflict_count": 1, "unvalidated_count": 2}
    clock.advance(400)
    agree(service)


def test_stats_are_per_namespace(attention: tuple[MemoryService, dict[str, str]]) -> None:
    service, _ = attention
    invoke(
        service,
        "store",
        {"content": "the data team migrated dashboards to Superset", "namespace": "analytics"},
    )
    brief = invoke(service, "stats", {"namespace": "analytics"})
    assert brief["total"] == 1
    assert brief["needs_attention"] == {
        "stale_count": 0,
        "conflict_count": 0,
        "unvalidated_count": 0,
    }
    assert brief["recent"][0]["summary"] == "the data team migrated dashboards to Superset"


# --------------------------------------------------------------------------- brief token size


def words(text: str) -> list[str]:
    return text.split()


WHO = words("alice bob carol dave erin frank grace heidi ivan judy mallory oscar olivia peggy")
DID = words(
    "fixed migrated deployed debugged reviewed benchmarked refactored documented profiled "
    "upgraded patched audited tuned archived renamed sharded indexed throttled"
)
WHAT = words(
    "login billing search resizer gateway payments cache tokens metrics scheduler mailer "
    "renderer limiter flags runner ledger invoices webhooks exports uploads sessions"
)
WHEN = words(
    "monday tuesday wednesday thursday friday saturday sunday january february march "
    "april june july august october november december morning evening"
)
AWKWARD = [
    "Überprüfung der Zahlungsdienst-Konfiguration: TLS-Zertifikate für api.eu-west-1 "
    "(2026-04-03, Ticket #48213) erneuert",
    "x9f3k2-qz7 7f9e0c1d-44b2-4c1a-9e3f-0b5d2c8a1e77 rollback of build 2026.04.03-rc17 "
    "on node-0042",
    "データベースの移行が完了しました — migration of the ledger finished at 03:14 UTC",
]


def bulk_items(count: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {"content": f"{rng.choice(WHO)} {rng.choice(DID)} {rng.choice(WHAT)} {rng.choice(WHEN)}"}
        for _ in range(count)
    ]


class TickingClock(MovableClock):
    """Each reading is a millisecond later: store_many batches get distinct times (memory ids
    carry the millisecond plus 32 random bits, so 10,000 ids in one millisecond could collide).
    """

    def __call__(self) -> datetime:
        self.advance(0.001 / 86_400)
        return self.current


@pytest.mark.slow
def test_brief_stats_stay_under_300_tokens_for_10000_memories(
    make_service: ServiceFactory, models_dir: Path
) -> None:
    clock = TickingClock(NOW - timedelta(days=200))
    # Degraded on purpose (reranker enabled but not available offline): the brief then also
    # carries its warnings, the largest it gets.
    offline = FastEmbedReranker("default", models_dir, enabled=True, offline=True)
    service = make_service(clock=clock, reranker=offline, rerank=True)
    stored, seed = 0, 0
    while stored < 10_000:  # 500 memories every 10 days over 200 days
        results = store_many(service, bulk_items(min(500, 10_000 - stored), seed))
        stored += sum(1 for r in results if "error" not in r)  # near-duplicates are rejected
        seed += 1
        clock.advance(10)
    awkward = []
    for text in AWKWARD:  # the most recent memories are the hardest to summarise
        clock.advance(1 / 86_400)
        awkward.append(store(service, content=text))
    invoke(
        service, "recall", {"query": "ledger migration"}
    )  # tries (and fails) to load the reranker
    brief = invoke(service, "stats", {})
    assert brief["total"] == 10_003
    assert [r["id"] for r in brief["recent"]] == awkward[::-1][: len(brief["recent"])]
    assert any("reranker" in warning for warning in brief["warnings"])
    tokens = service.embedder.count_tokens(json.dumps(brief))
    assert tokens < 300, (tokens, brief)
    assert brief["needs_attention"]["stale_count"] > 1000  # over half are 90+ days old


# --------------------------------------------------------------------------- reflect


def test_reflect_lists_stale_and_unvalidated_memories_with_reasons(
    attention: tuple[MemoryService, dict[str, str]],
) -> None:
    service, ids = attention
    report = conforms("reflect", invoke(service, "reflect", {}))
    review = {item["id"]: item for item in report["needs_review"]}
    assert set(review) == {
        ids[k]
        for k in (
            "stale_120",
            "stale_200",
            "aging_45",
            "confirmed_long_ago",
            "never_confirmed",
        )
    }
    assert report["needs_review_total"] == 5
    assert review[ids["stale_200"]]["staleness"] == "stale"
    assert review[ids["stale_200"]]["reasons"] == [
        "stale: effective age 200 days",
        "never validated",
    ]
    assert review[ids["confirmed_long_ago"]]["reasons"] == [
        "aging: effective age 100 days",
        "last validated 100 days ago",
    ]
    assert review[ids["never_confirmed"]]["reasons"] == [
        "aging: effective age 100 days",
        "never validated",
    ]
    # Aging by age, but its source citation today confirmed it: reviewed, not listed again.
    assert ids["aging_80_cited"] not in review
    first = report["needs_review"][0]
    assert first["id"] == ids["stale_200"]  # the most overdue first
    assert ids["fresh"] not in review and ids["runbook"] not in review


def test_confirming_takes_a_memory_off_the_review_list(
    attention: tuple[MemoryService, dict[str, str]],
) -> None:
    service, ids = attention
    answer = invoke(service, "reflect", {"confirm_ids": [ids["never_confirmed"]]})
    assert answer["confirmed"] == [ids["never_confirmed"]]
    assert ids["never_confirmed"] not in [i["id"] for i in answer["needs_review"]]


def test_reflect_reports_contradictions(
    attention: tuple[MemoryService, dict[str, str]],
) -> None:
    service, ids = attention
    [alert] = conforms("reflect", invoke(service, "reflect", {}))["contradictions"]
    assert alert["subject"] == "payments"
    assert alert["predicate"] == "database"
    objects = {fact["id"]: fact["object"] for fact in alert["facts"]}
    assert objects == {ids["db_current"]: "postgres 16", ids["db_contested"]: "mysql 8"}


def test_reflect_sections_can_be_switched_off_and_limited(
    attention: tuple[MemoryService, dict[str, str]],
) -> None:
    service, _ = attention
    report = invoke(
        service, "reflect", {"include_stale": False, "include_contradictions": False, "limit": 2}
    )
    assert "needs_review" not in report and "contradictions" not in report
    assert len(report["forget_candidates"]) == 2
    assert len(invoke(service, "reflect", {"limit": 3})["needs_review"]) == 3


def test_forget_candidates_are_the_least_accessed_of_the_old_episodes(
    make_service: ServiceFactory,
) -> None:
    clock = MovableClock(NOW - timedelta(days=60))
    service = make_service(clock=clock, lifecycle={"access_flush_seconds": 60})
    popular = store(service, content="the release train leaves every second Tuesday")
    rare = store(service, content="the parking garage closes at 22:00")
    pinned = store(service, content="the company was founded in Tallinn", pinned=True)
    clock.advance(60)  # aging
    fresh = store(service, content="the new espresso machine arrived today")
    for _ in range(3):
        invoke(service, "recall", {"query": "when does the release train leave", "limit": 1})
    service.access.flush()
    candidates = invoke(service, "reflect", {})["forget_candidates"]
    assert [(c["id"], c["access_count"]) for c in candidates] == [(rare, 0), (popular, 3)]
    assert pinned not in [c["id"] for c in candidates]
    assert fresh not in [c["id"] for c in candidates]  # never suggest forgetting what is new


def test_reflect_lists_alias_candidates(service: MemoryService) -> None:
    invoke(
        service, "store", {"content": "the auth service issues JWTs", "entities": ["auth service"]}
    )
    outcome = stored(
        service,
        {
            "content": "the authentication service rotates its signing keys",
            "entities": ["authentication service"],
        },
    )
    assert outcome.entities[0].resolved_by == "new"  # close, but not merged
    [candidate] = invoke(service, "reflect", {})["alias_candidates"]
    assert candidate["name"] == "authentication service"
    assert candidate["entity"] == "auth service"
    assert 0.8 <= candidate["score"] < 0.92


def test_reflect_lists_inactive_entities(make_service: ServiceFactory) -> None:
    clock = MovableClock(NOW)
    service = make_service(clock=clock)
    invoke(service, "store", {"content": "Jenkins ran the nightly build", "entities": ["jenkins"]})
    clock.advance(100)
    invoke(
        service,
        "store",
        {"content": "GitHub Actions ran the nightly build", "entities": ["github-actions"]},
    )
    inactive = invoke(service, "reflect", {})["inactive_entities"]
    assert [(e["name"], e["memories"]) for e in inactive] == [("jenkins", 1)]


def test_reflect_and_recall_show_a_facts_decaying_confidence(
    make_service: ServiceFactory, clock: MovableClock
) -> None:
    """Layer 5: a fact nobody confirms loses confidence (halved by the 180-day stale mark);
    reflect lists it once below 0.5 with the reason, recall shows the current value, and a
    confirmation restores it."""
    service = make_service(clock=clock)
    fact = invoke(
        service,
        "store",
        {"subject": "billing-db", "predicate": "runs", "object": "postgres 15", "confidence": 0.9},
    )["id"]
    clock.advance(120)
    [early] = invoke(
        service, "recall", {"query": "what does billing-db run", "limit": 1, "explain": True}
    )["results"]
    assert early["explain"]["confidence"] == 0.9
    assert early["explain"]["effective_confidence"] == round(0.9 * 2 ** (-120 / 180), 3)
    assert not any(
        "confidence" in r
        for i in invoke(service, "reflect", {})["needs_review"]
        for r in i["reasons"]
    )
    clock.advance(80)  # 200 days without validation
    [item] = [i for i in invoke(service, "reflect", {})["needs_review"] if i["id"] == fact]
    assert item["effective_confidence"] == round(0.9 * 2 ** (-200 / 180), 3)  # 0.416
    assert "confidence decayed from 0.90 to 0.42 (200 days without validation)" in item["reasons"]
    invoke(service, "reflect", {"confirm_ids": [fact]})
    answer = invoke(
        service,
        "recall",
        {"query": "what does billing-db run", "limit": 1, "include_stale": True, "explain": True},
    )
    assert answer["results"][0]["explain"]["effective_confidence"] == 0.9


def test_confirming_an_old_event_says_it_stays_stale_and_ends_the_review_loop(
    make_service: ServiceFactory,
) -> None:
    clock = MovableClock(NOW - timedelta(days=300))
    service = make_service(clock=clock)
    event = store(service, content="the datacenter in Frankfurt was commissioned")
    clock.advance(300)
    assert event in [i["id"] for i in invoke(service, "reflect", {})["needs_review"]]
    answer = invoke(service, "reflect", {"confirm_ids": [event]})
    assert answer["confirmed"] == [event] and answer["still_stale"] == [event]
    assert "include_stale" in answer["still_stale_note"]
    assert event not in [i["id"] for i in answer["needs_review"]]
    assert event not in [i["id"] for i in invoke(service, "reflect", {})["needs_review"]]


def test_a_fact_stored_with_low_confidence_is_not_reported_as_decayed(
    make_service: ServiceFactory, clock: MovableClock
) -> None:
    service = make_service(clock=clock)
    fact = store(service, subject="cdn", predicate="provider", object="fastly", confidence=0.4)
    clock.advance(1)
    review = {i["id"]: i for i in invoke(service, "reflect", {})["needs_review"]}
    assert not any("decayed" in r for r in review.get(fact, {}).get("reasons", []))


def reasons_for(service: MemoryService, memory_id: str) -> list[str] | None:
    """The fact's review reasons, or None when reflect does not list it."""
    review = {i["id"]: i["reasons"] for i in invoke(service, "reflect", {})["needs_review"]}
    return review.get(memory_id)


def test_confidence_decay_is_flagged_only_from_above_half_to_below_it(
    make_service: ServiceFactory, clock: MovableClock
) -> None:
    """A fact stored at exactly 0.5 has not *decayed* across 0.5: it is never flagged for it
    (reflect has no "low confidence" concept; the agent chose that confidence). Just above 0.5
    it is flagged once it has fallen below, with honest numbers."""
    service = make_service(clock=clock)
    half = store(service, subject="cdn", predicate="provider", object="fastly", confidence=0.5)
    above = store(service, subject="dns", predicate="provider", object="route53", confidence=0.51)
    clock.advance(1 / 24)  # an hour later: both slightly decayed, neither in review
    assert reasons_for(service, half) is None
    assert reasons_for(service, above) is None
    assert agree(service)["unvalidated_count"] == 0
    clock.advance(10)  # 0.51 x 2^(-10.04/180) = 0.4907: below 0.5 now
    assert reasons_for(service, half) is None
    assert reasons_for(service, above) == [
        "confidence decayed from 0.51 to 0.49 (10 days without validation)"
    ]
    assert agree(service)["unvalidated_count"] == 1  # stats counts it too
    clock.advance(90)  # both unvalidated for 100 days: listed, only one of them as decayed
    assert reasons_for(service, half) == ["aging: effective age 100 days", "never validated"]
    assert any("decayed from 0.51" in r for r in reasons_for(service, above) or [])


def test_a_decay_reason_never_shows_two_equal_numbers(
    make_service: ServiceFactory, clock: MovableClock
) -> None:
    service = make_service(clock=clock)
    fact = store(service, subject="queue", predicate="runs_on", object="kafka", confidence=0.501)
    clock.advance(1)  # 0.501 -> 0.4991
    [reason] = reasons_for(service, fact) or []
    assert reason == "confidence decayed from 0.501 to 0.499 (1 days without validation)"


def test_stats_says_when_the_embedding_model_cannot_load(
    make_service: ServiceFactory, tmp_path: Path
) -> None:
    data = tmp_path / "pinned-elsewhere"
    service = make_service(data)
    store(service, content="a memory embedded with MiniLM")
    service.meta.set_meta("embedding_model", "BAAI/bge-base-en-v1.5")  # a model not available
    service.meta.set_meta("embedding_dimension", "768")
    service.close()
    from tests.support.harness import make_settings

    from ferrex.bootstrap import Options, build_service

    reopened = build_service(make_settings(data, service.settings.models_dir), Options())
    try:
        brief = invoke(reopened, "stats", {})
        assert brief["total"] == 1
        assert any(w.startswith("not ready: ") for w in brief["warnings"])
        detailed = invoke(reopened, "stats", {"detailed": True})
        assert any("BAAI/bge-base-en-v1.5" in w for w in detailed["warnings"])
        assert detailed["model"]["name"] == "BAAI/bge-base-en-v1.5"
        assert detailed["model"]["loaded"] is False
    finally:
        reopened.close()


def test_stats_answers_when_the_model_files_are_broken(tmp_path: Path) -> None:
    """A load failure that is not ferrex's own error (a corrupt --model-path) still gets an
    answer from stats, with a warning that says what to do and leaks no path or exception
    text."""
    from tests.support.harness import make_settings

    from ferrex.bootstrap import Options, build_service

    broken = tmp_path / "broken-model"
    broken.mkdir()
    settings = make_settings(tmp_path / "d", tmp_path / "models", model_path=str(broken))
    service = build_service(settings, Options())
    try:
        brief = invoke(service, "stats", {})
        assert brief["total"] == 0
        [warning] = [w for w in brief["warnings"] if w.startswith("not ready: ")]
        assert str(tmp_path) not in warning
        assert "ONNXRuntime" not in warning and "NO_SUCHFILE" not in warning
        assert "--model-path" in warning and "model.onnx" in warning, warning
        assert "or drop the flag" in warning, warning  # the advice fits the brief form
    finally:
        service.close()
