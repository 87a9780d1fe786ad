"""Decay and eviction (spec "Memory Lifecycle": Decay, Eviction).

Proves: the decay_score half-life math (episodic half-life 30 days: 0.5 at 30, 0.25 at 60;
slower with access and after validation; 1.0 when pinned; no time decay for semantic facts and
procedures; counted from creation, not from an episode's event time); under a storage budget
(``lifecycle.max_memories`` / ``max_storage_mb``) memories are evicted in the spec's priority
order (superseded facts and episodes past the 180-day retention window; superseded episodes
within it; stale unreferenced episodic; stale episodic cited as a fact's source; aging episodic
by lowest relevance) and never active semantic facts, procedures (any version), pinned or fresh
memories, nor the memories a store just wrote (its answer says how many others it evicted);
superseded memories past retention go even under budget; every eviction is journaled in the
audit log, removed from the vector index and counted in detailed stats. Memories are aged by
moving the clock: an episode's ``timestamp`` does not age it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.support.clock import MovableClock
from tests.support.vocabulary import SUBSYSTEMS

from ferrex.core.clock import to_iso
from ferrex.core.lifecycle.decay import decay_score
from ferrex.core.memory import Memory, MemoryType
from ferrex.core.service import MemoryService
from ferrex.server.calls import run_tool as invoke
from ferrex.server.calls import store_many
from ferrex.server.presenter import iso as shown

T0 = datetime(2025, 1, 1, 9, 0, tzinfo=UTC)
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
ServiceFactory = Callable[..., MemoryService]


def episode(
    days: float,
    *,
    kind: str = "episodic",
    count: int = 0,
    validated: float | None = None,
    pinned: bool = False,
) -> Memory:
    when = NOW - timedelta(days=days)
    return Memory(
        id="mem_decay",
        namespace="default",
        type=MemoryType(kind),
        created_at=when,
        updated_at=when,
        event_time=when,
        content="x",
        access_count=count,
        last_validated=None if validated is None else NOW - timedelta(days=validated),
        pinned=pinned,
    )


# --------------------------------------------------------------------------- decay


@pytest.mark.parametrize(
    ("days", "expected"), [(0, 1.0), (15, 2**-0.5), (30, 0.5), (60, 0.25), (90, 0.125)]
)
def test_episodic_relevance_halves_every_30_days(days: int, expected: float) -> None:
    assert decay_score(episode(days), NOW, 30.0) == pytest.approx(expected)


def test_access_slows_decay() -> None:
    scores = [decay_score(episode(30, count=n), NOW, 30.0) for n in (0, 1, 5, 50)]
    assert scores[0] == pytest.approx(0.5)
    assert scores == sorted(scores) and len(set(scores)) == 4
    # Half-life 30 x (1 + 0.5 ln(1 + n)): five accesses stretch it to ~56.9 days.
    assert scores[2] == pytest.approx(2 ** (-30 / (30 * (1 + 0.5 * math.log(6)))))


def test_validation_restarts_the_decay_clock() -> None:
    assert decay_score(episode(60, validated=30), NOW, 30.0) == pytest.approx(0.5)
    assert decay_score(episode(60, validated=0), NOW, 30.0) == pytest.approx(1.0)


def test_pinned_memories_and_facts_and_procedures_do_not_decay() -> None:
    assert decay_score(episode(900, pinned=True), NOW, 30.0) == 1.0
    assert decay_score(episode(900, kind="semantic"), NOW, 30.0) == 1.0
    assert decay_score(episode(900, kind="procedural"), NOW, 30.0) == 1.0


def test_decay_counts_from_creation_not_from_the_event_time() -> None:
    """Spec: "exponential decay from creation/last-update time". An event dated 120 days ago
    but recorded today has not decayed; one recorded 30 days ago has halved."""
    recorded_today = episode(0)
    recorded_today.event_time = NOW - timedelta(days=120)
    assert decay_score(recorded_today, NOW, 30.0) == 1.0
    recorded_earlier = episode(30)
    recorded_earlier.event_time = NOW
    assert decay_score(recorded_earlier, NOW, 30.0) == pytest.approx(0.5)


def test_configured_half_life_shows_in_reflect(make_service: ServiceFactory) -> None:
    clock = MovableClock(NOW)
    service = make_service(clock=clock, lifecycle={"episodic_half_life_days": 40})
    stored = invoke(
        service, "store", {"content": "the staging cluster ran out of disk during the release"}
    )
    clock.advance(40)  # aging: a forget candidate
    candidates = invoke(service, "reflect", {})["forget_candidates"]
    assert [(c["id"], c["relevance"]) for c in candidates] == [(stored["id"], 0.5)]


# --------------------------------------------------------------------------- eviction order


def store(service: MemoryService, **arguments: Any) -> str:
    result = invoke(service, "store", arguments)
    assert result["status"] in {"stored", "superseded"}, result
    return str(result["id"])


def build_lifecycle_store(service: MemoryService, clock: MovableClock) -> dict[str, str]:
    """Twelve memories whose fates at T0 + 400 days cover every eviction priority."""
    ids: dict[str, str] = {}
    ids["stale_cited"] = store(
        service,
        content="the team load-tested checkout at 5k requests per second on the old cluster",
    )
    ids["citing_fact"] = store(
        service,
        subject="checkout",
        predicate="handles",
        object="5k rps",
        source=f"memory:{ids['stale_cited']}",
    )
    ids["old_runtime"] = store(service, subject="api-server", predicate="uses", object="tokio 1.36")
    ids["old_owner"] = store(service, subject="billing", predicate="owned_by", object="team atlas")
    ids["procedure"] = store(
        service,
        type="procedural",
        name="rotate-certificates",
        steps=["issue new certs", "reload nginx", "revoke the old certs"],
    )
    ids["pinned"] = store(
        service, content="the founders decided to never store card numbers", pinned=True
    )
    clock.advance(210)  # T0 + 210
    ids["new_runtime"] = store(service, subject="api-server", predicate="uses", object="tokio 1.38")
    clock.advance(70)  # T0 + 280: 120 days old at the end
    ids["stale"] = store(service, content="a fan failed in rack 12 and was replaced by facilities")
    clock.advance(20)  # T0 + 300
    ids["new_owner"] = store(
        service, subject="billing", predicate="owned_by", object="team borealis"
    )
    clock.advance(30)  # T0 + 330: 70 days old at the end
    ids["aging_old"] = store(service, content="the marketing site moved to a static generator")
    clock.advance(30)  # T0 + 360: 40 days old at the end
    ids["aging_young"] = store(service, content="we renamed the mobile app to Orbit in the stores")
    clock.advance(35)  # T0 + 395: 5 days old at the end
    ids["fresh"] = store(service, content="Priya started the on-call rotation this week")
    clock.advance(5)  # T0 + 400 days
    return ids


EVICTION_ORDER = ["old_runtime", "stale", "stale_cited", "aging_old", "aging_young"]
NEVER_EVICTED = [
    "citing_fact",
    "new_runtime",
    "new_owner",
    "old_owner",
    "procedure",
    "pinned",
    "fresh",
]


def levels(service: MemoryService, ids: dict[str, str]) -> dict[str, str]:
    fresh = {
        r["id"]: r["freshness"]["staleness"]
        for r in invoke(
            service,
            "recall",
            {"query": "team", "limit": 50, "include_stale": True, "include_invalidated": True},
        )["results"]
    }
    return {name: fresh.get(memory_id, "?") for name, memory_id in ids.items()}


def test_budget_evicts_in_the_spec_priority_order(make_service: ServiceFactory) -> None:
    clock = MovableClock(T0)
    # Retention is restored to the default 180 days once the store is built, so no periodic
    # sweep can evict the expired fact while building.
    service = make_service(clock=clock, lifecycle={"superseded_retention_days": 10_000})
    ids = build_lifecycle_store(service, clock)
    service.settings.lifecycle.superseded_retention_days = 180
    assert service.meta.count_memories() == 12
    # Preconditions: the levels this scenario relies on.
    seen = levels(service, ids)
    assert seen["stale"] == seen["stale_cited"] == seen["pinned"] == "stale"
    assert seen["aging_old"] == seen["aging_young"] == "aging"
    assert seen["old_runtime"] == seen["old_owner"] == "superseded"
    assert seen["citing_fact"] == seen["new_runtime"] == "stale"  # stale, yet active facts
    assert seen["procedure"] == "stale"

    evicted: list[str] = []
    for budget in range(11, 6, -1):
        service.settings.lifecycle.max_memories = budget
        assert service.enforce_budget() == 1
        gone = [name for name, mid in ids.items() if not service.meta.memory_exists(mid)]
        evicted.extend(name for name in gone if name not in evicted)
        assert service.meta.count_memories() == budget
    assert evicted == EVICTION_ORDER

    service.settings.lifecycle.max_memories = 3
    assert service.enforce_budget() == 0  # over budget, but nothing left may be evicted
    assert all(service.meta.memory_exists(ids[name]) for name in NEVER_EVICTED)

    audit = service.meta.audit_entries("default", "evict")
    id_to_name = {mid: name for name, mid in ids.items()}
    assert [id_to_name[e["memory_id"]] for e in reversed(audit)] == EVICTION_ORDER
    reasons = [e["detail"]["reason"] for e in reversed(audit)]
    assert reasons[0] == "superseded past retention window"
    assert reasons[1] == "stale episodic" and "cited" in reasons[2]
    assert all(r.startswith("aging episodic") for r in reasons[3:])
    points = service.index.points_by_memory()
    assert not any(ids[name] in points for name in EVICTION_ORDER)
    assert all(ids[name] in points for name in NEVER_EVICTED)
    evictions = invoke(service, "stats", {"detailed": True})["evictions"]
    assert evictions == {"total": 5, "last_at": shown(clock.current)}


def test_storing_over_budget_evicts_automatically(make_service: ServiceFactory) -> None:
    clock = MovableClock(NOW - timedelta(days=300))
    service = make_service(clock=clock, lifecycle={"max_memories": 3})
    older = store(service, content="the coffee machine on floor 3 was replaced")
    clock.advance(100)
    old = store(service, content="the quarterly offsite took place in Lisbon")
    clock.advance(200)
    fact = store(service, subject="office", predicate="located_in", object="Berlin")
    assert service.meta.count_memories() == 3
    answer = invoke(
        service, "store", {"content": "the design review for the new search page is on Friday"}
    )
    # One over budget: of the two stale episodes, the least relevant (older) goes first, and
    # the store says so.
    assert answer["status"] == "stored" and answer["evicted"] == 1
    assert not service.meta.memory_exists(older)
    assert all(service.meta.memory_exists(i) for i in (old, fact, answer["id"]))
    assert invoke(service, "stats", {"detailed": True})["evictions"]["total"] == 1
    quiet = invoke(service, "store", {"content": "the lift on floor 2 is being serviced on Monday"})
    assert quiet["evicted"] == 1  # one more over: the 200-day-old episode goes
    assert not service.meta.memory_exists(old)
    assert service.meta.memory_exists(quiet["id"])


def test_a_store_never_evicts_what_it_just_wrote(make_service: ServiceFactory) -> None:
    """Over budget with nothing else evictable, the memory just stored stays (and the answer
    names no eviction), even where the namespace's thresholds make every episode stale at once
    (a store answering "stored" must never leave a memory that is already gone)."""
    staleness = {"namespaces": {"scratch": {"episodic": {"fresh": 0, "aging": 0, "stale": 0}}}}
    service = make_service(clock=lambda: NOW, staleness=staleness, lifecycle={"max_memories": 1})
    pinned = invoke(
        service, "store", {"content": "the founders never store card numbers", "pinned": True}
    )
    answer = invoke(
        service, "store", {"content": "the test rig was rebooted", "namespace": "scratch"}
    )
    assert answer["status"] == "stored" and "evicted" not in answer
    assert service.meta.memory_exists(answer["id"])
    assert service.meta.memory_exists(pinned["id"])
    assert (
        len(
            invoke(
                service,
                "recall",
                {"query": "test rig", "namespace": "scratch", "include_stale": True},
            )["results"]
        )
        == 1
    )
    # The next store may evict it (it is stale and over budget), but not itself.
    second = invoke(
        service, "store", {"content": "the build cache was wiped", "namespace": "scratch"}
    )
    assert second["evicted"] == 1
    assert not service.meta.memory_exists(answer["id"])
    assert service.meta.memory_exists(second["id"])


def test_store_many_never_evicts_its_own_batch(make_service: ServiceFactory) -> None:
    staleness = {"namespaces": {"scratch": {"episodic": {"fresh": 0, "aging": 0, "stale": 0}}}}
    service = make_service(clock=lambda: NOW, staleness=staleness, lifecycle={"max_memories": 2})
    earlier = invoke(service, "store", {"content": "rebooted rack one", "namespace": "scratch"})
    batch = store_many(
        service,
        [{"content": f"rebooted rack {n}", "namespace": "scratch"} for n in ("two", "three")],
    )
    assert [b["status"] for b in batch] == ["stored", "stored"]
    assert batch[-1]["evicted"] == 1 and "evicted" not in batch[0]
    assert not service.meta.memory_exists(earlier["id"])
    assert all(service.meta.memory_exists(b["id"]) for b in batch)


def test_a_store_many_call_of_several_batches_never_evicts_its_own_writes(
    make_service: ServiceFactory,
) -> None:
    """The budget is enforced once, after the last batch: an earlier batch of the same call is
    never evicted by a later one (every answer says stored, and every stored memory exists)."""
    staleness = {"namespaces": {"scratch": {"episodic": {"fresh": 0, "aging": 0, "stale": 0}}}}
    service = make_service(clock=lambda: NOW, staleness=staleness, lifecycle={"max_memories": 2})
    earlier = invoke(
        service, "store", {"content": "the mail relay queue was purged", "namespace": "scratch"}
    )
    names = ("alpha payments", "billing ledger", "kafka broker", "dns resolver", "mail relay")
    answers = store_many(
        service,
        [
            {"content": f"{n}: the {n} rack of servers was rebooted", "namespace": "scratch"}
            for n in names
        ],
        batch=2,
    )
    assert [a["status"] for a in answers] == ["stored"] * 5
    assert all(service.meta.memory_exists(a["id"]) for a in answers)
    assert not service.meta.memory_exists(earlier["id"])
    assert answers[-1]["evicted"] == 1
    assert all("evicted" not in a for a in answers[:-1])


def test_a_store_never_evicts_the_memory_its_answer_says_it_superseded(
    make_service: ServiceFactory,
) -> None:
    staleness = {"namespaces": {"scratch": {"episodic": {"fresh": 0, "aging": 0, "stale": 0}}}}
    service = make_service(clock=lambda: NOW, staleness=staleness, lifecycle={"max_memories": 2})
    first = invoke(service, "store", {"content": "standup moved to 9am", "namespace": "scratch"})
    other = invoke(
        service, "store", {"content": "the office wifi was replaced", "namespace": "scratch"}
    )
    answer = invoke(
        service,
        "store",
        {"content": "standup moved to 10am", "namespace": "scratch", "supersedes": first["id"]},
    )
    assert answer["superseded"] == [first["id"]]
    assert service.meta.memory_exists(first["id"])
    assert answer["evicted"] == 1 and not service.meta.memory_exists(other["id"])


def test_an_old_event_recorded_today_is_fresh_recalled_and_kept(
    make_service: ServiceFactory,
) -> None:
    """Age counts from creation: an episode stored today about something 120 days ago is a
    fresh memory (its timestamp still dates the event), returned by a default recall and
    never an eviction candidate; the 120-day-old memory is the one that goes."""
    clock = MovableClock(NOW - timedelta(days=120))
    service = make_service(clock=clock, lifecycle={"max_memories": 1})
    recorded_long_ago = store(service, content="the billing database failed over to the replica")
    clock.advance(120)
    event = to_iso(NOW - timedelta(days=120))
    answer = invoke(
        service,
        "store",
        {
            "content": "the billing database failover in March was caused by a full disk",
            "timestamp": event,
        },
    )
    assert answer["status"] == "stored" and answer["evicted"] == 1
    assert not service.meta.memory_exists(recorded_long_ago)
    found = invoke(service, "recall", {"query": "billing database failover"})
    assert found.get("stale_held_back", 0) == 0
    [result] = found["results"]
    assert result["id"] == answer["id"] and result["timestamp"] == shown(NOW - timedelta(days=120))
    assert result["freshness"]["age_days"] == 0 and result["freshness"]["staleness"] == "fresh"
    assert service.enforce_budget() == 0
    assert service.meta.memory_exists(answer["id"])
    assert invoke(service, "stats", {})["needs_attention"]["stale_count"] == 0


def test_storage_size_budget_evicts_only_what_may_go(make_service: ServiceFactory) -> None:
    clock = MovableClock(NOW - timedelta(days=150))
    service = make_service(clock=clock)
    stale = store(service, content="the legacy FTP server was switched off")
    clock.advance(105)
    aging = store(service, content="we trialled a four-day week in the support team")
    clock.advance(45)
    fresh = store(service, content="the new hire laptops arrived this morning")
    fact = store(service, subject="support", predicate="uses", object="zendesk")
    procedure = store(
        service,
        type="procedural",
        name="reset-password",
        steps=["verify identity", "send reset link"],
    )
    service.settings.lifecycle.max_storage_mb = 0.001  # far below what any store occupies
    assert service.enforce_budget() == 2
    assert not service.meta.memory_exists(stale) and not service.meta.memory_exists(aging)
    assert all(service.meta.memory_exists(i) for i in (fresh, fact, procedure))


def test_a_superseded_episode_is_evicted_before_any_current_one(
    make_service: ServiceFactory,
) -> None:
    """An episode replaced via ``supersedes`` is history: under budget pressure it goes first
    (within its retention window, after only what is past retention), before stale and aging
    current episodes; its current replacement, fresh, stays."""
    clock = MovableClock(T0)
    service = make_service(clock=clock)
    stale = store(service, content="a fan failed in rack 12 and was replaced by facilities")
    clock.advance(50)
    aging = store(service, content="the marketing site moved to a static generator")
    clock.advance(40)
    draft = store(service, content="the release review is on Tuesday at 10:00")
    final = store(
        service, content="the release review moved to Thursday at 14:00", supersedes=draft
    )
    clock.advance(10)  # T0 + 100: stale 100 days, aging 50, the draft superseded 10 days ago
    names = {stale: "stale", aging: "aging", draft: "superseded", final: "current"}
    evicted: list[str] = []
    for budget in (3, 2, 1):
        service.settings.lifecycle.max_memories = budget
        assert service.enforce_budget() == 1
        gone = [names[m] for m in names if not service.meta.memory_exists(m)]
        evicted.extend(name for name in gone if name not in evicted)
    assert evicted == ["superseded", "stale", "aging"]
    assert service.meta.memory_exists(final)
    reasons = [
        e["detail"]["reason"] for e in reversed(service.meta.audit_entries("default", "evict"))
    ]
    assert reasons == ["superseded episodic", "stale episodic", "aging episodic, low relevance"]


def test_superseded_episodes_past_retention_go_even_under_budget_but_procedures_stay(
    make_service: ServiceFactory,
) -> None:
    """Superseded facts *and* episodes past the retention window are swept without any budget;
    superseded procedure versions are kept for rollback and pinned memories are never evicted."""
    clock = MovableClock(T0)
    service = make_service(clock=clock)
    old_episode = store(service, content="standup moved to 9am")
    pinned_episode = store(service, content="the office wifi rotates monthly", pinned=True)
    version_one = invoke(
        service,
        "store",
        {"type": "procedural", "name": "deploy", "steps": ["build", "push", "restart"]},
    )["id"]
    clock.advance(1)
    new_episode = store(service, content="standup moved to 10am instead", supersedes=old_episode)
    store(service, content="the office wifi rotates weekly now", supersedes=pinned_episode)
    version_two = invoke(
        service,
        "store",
        {"type": "procedural", "name": "deploy", "steps": ["build", "test", "push", "restart"]},
    )["id"]
    assert service.meta.get_memory(version_one).t_invalid is not None  # type: ignore[union-attr]
    clock.advance(180)  # superseded exactly 180 days ago: not past the window yet
    assert service.sweep_retention(force=True) == 0
    clock.advance(1)
    assert service.settings.lifecycle.max_memories == 0  # no budget at all
    assert service.sweep_retention(force=True) == 1
    assert not service.meta.memory_exists(old_episode)
    assert old_episode not in service.index.points_by_memory()
    for kept in (pinned_episode, version_one, version_two, new_episode):
        assert service.meta.memory_exists(kept)
    [entry] = service.meta.audit_entries("default", "evict")
    assert (entry["memory_id"], entry["detail"]["reason"]) == (
        old_episode,
        "superseded past retention window",
    )


# --------------------------------------------------------------------------- retention, pinning


def test_retention_counts_from_when_the_fact_was_superseded_not_from_its_t_invalid(
    make_service: ServiceFactory,
) -> None:
    """A fact superseded today by one valid since long ago (or stored as already historical)
    keeps the full 180-day window: "the old fact is NOT deleted — it remains queryable"."""
    clock = MovableClock(T0)
    service = make_service(clock=clock)
    old = store(
        service, subject="db", predicate="version", object="postgres 14", t_valid="2024-01-01"
    )
    store(service, subject="db", predicate="version", object="postgres 15", t_valid="2024-06-01")
    historical = invoke(
        service,
        "store",
        {"subject": "db", "predicate": "version", "object": "postgres 13", "t_valid": "2023-01-01"},
    )
    assert historical["status"] == "historical"
    assert service.sweep_retention(force=True) == 0
    query = {"query": "db version", "include_invalidated": True, "limit": 10}
    found = {r["id"] for r in invoke(service, "recall", query)["results"]}
    assert {old, historical["id"]} <= found
    clock.advance(180)
    assert service.sweep_retention(force=True) == 0
    clock.advance(1)
    assert service.sweep_retention(force=True) == 2
    assert not service.meta.memory_exists(old)


def test_superseded_past_retention_is_evicted_even_under_budget(
    make_service: ServiceFactory,
) -> None:
    clock = MovableClock(T0)
    service = make_service(clock=clock)
    expired = store(service, subject="db", predicate="version", object="postgres 14")
    kept = store(service, subject="cache", predicate="version", object="redis 6")
    clock.advance(10)
    store(service, subject="db", predicate="version", object="postgres 15")
    clock.advance(100)
    store(service, subject="cache", predicate="version", object="redis 7")
    clock.advance(80)  # db 14 superseded 180 days ago (not past yet); cache 6 for 80 days
    assert service.sweep_retention(force=True) == 0
    clock.advance(1)
    assert service.settings.lifecycle.max_memories == 0  # no budget at all
    assert service.sweep_retention(force=True) == 1
    assert not service.meta.memory_exists(expired)
    assert service.meta.memory_exists(kept)
    assert expired not in service.index.points_by_memory()
    [entry] = service.meta.audit_entries("default", "evict")
    assert entry["memory_id"] == expired
    history = invoke(
        service, "recall", {"query": "db version postgres", "include_invalidated": True}
    )
    assert expired not in [r["id"] for r in history["results"]]


def test_retention_sweep_runs_when_the_store_opens(
    make_service: ServiceFactory, tmp_path: Any
) -> None:
    clock = MovableClock(T0)
    data = tmp_path / "reopened"
    first = make_service(data, clock=clock)
    old = store(first, subject="queue", predicate="broker", object="rabbitmq")
    store(first, subject="queue", predicate="broker", object="kafka")
    first.close()
    clock.advance(181)
    second = make_service(data, clock=clock)
    second.ensure_ready()
    assert not second.meta.memory_exists(old)
    assert invoke(second, "stats", {"detailed": True})["evictions"]["total"] == 1


def test_pinning_through_reflect_protects_from_eviction(make_service: ServiceFactory) -> None:
    clock = MovableClock(NOW - timedelta(days=400))
    service = make_service(clock=clock)
    keep = store(service, content="the original data-center lease was signed in 2019")
    clock.advance(100)
    other = store(service, content="a printer jam stopped the payroll run for an hour")
    clock.advance(300)
    assert invoke(service, "reflect", {"pin_ids": [keep]})["pinned"] == [keep]
    assert service.meta.get_memory(keep).pinned  # type: ignore[union-attr]
    candidates = [c["id"] for c in invoke(service, "reflect", {})["forget_candidates"]]
    assert candidates == [other]  # pinned memories are not offered for forgetting
    service.settings.lifecycle.max_memories = 1
    assert service.enforce_budget() == 1
    assert service.meta.memory_exists(keep) and not service.meta.memory_exists(other)
    service.settings.lifecycle.max_memories = 0
    assert invoke(service, "reflect", {"unpin_ids": [keep]})["unpinned"] == [keep]
    service.settings.lifecycle.max_memories = 0
    invoke(service, "store", {"content": "the board approved the budget for the new office"})
    service.settings.lifecycle.max_memories = 1
    assert service.enforce_budget() == 1
    assert not service.meta.memory_exists(keep)


def test_storage_budget_converges_to_just_under_the_limit(make_service: ServiceFactory) -> None:
    """The budget counts the memories' data, which evicting lowers by exactly the evicted size:
    a budget 3% under the current size costs a couple of memories, once, and later stores
    each push out about their own size, never a cascade (file sizes never shrink, so a budget
    on them could not be met)."""
    clock = MovableClock(NOW - timedelta(days=80))
    service = make_service(clock=clock)
    actions = ["migrated", "load-tested", "documented", "paged on-call for"]
    notes = [f"{a} the {s} service" for a in actions for s in SUBSYSTEMS]
    for note in reversed(notes):  # one a day, from 79 to 40 days ago: all aging at NOW
        clock.advance(1)
        stored = store_many(service, [{"content": note}])
        assert all("error" not in s for s in stored), stored
    clock.current = NOW
    size = service.storage_bytes()
    assert size > 0 and service.meta.count_memories() == 40
    # The store's total (one aggregate query) is the sum of what each memory counts.
    from ferrex.core.lifecycle.decay import memory_size

    every = service.meta.data_sizes(list(service.meta.all_memory_ids()))
    assert size == sum(memory_size(text, chunks, 384) for text, chunks in every.values())
    service.settings.lifecycle.max_storage_mb = 0.97 * size / (1024 * 1024)
    budget = service.settings.lifecycle.max_storage_mb * 1024 * 1024
    evicted = service.enforce_budget()
    assert 1 <= evicted <= 3
    assert service.storage_bytes() <= budget
    assert service.enforce_budget() == 0  # met: nothing more to do
    for n in range(3):
        store(service, content=f"{['bought', 'sold', 'lent'][n]} a bicycle at the flea market")
        assert service.storage_bytes() <= budget
        assert 37 - 3 <= service.meta.count_memories() <= 40
    detailed = invoke(service, "stats", {"detailed": True})
    assert detailed["storage_mb"] == round(service.storage_bytes() / (1024 * 1024), 2)
    assert detailed["disk_mb"] >= detailed["storage_mb"]
