"""Staleness safeguards (spec "Staleness Safeguards", Layers 2, 3 and 6; unit-test list).

Proves: the fresh / aging / stale levels of each memory type at the spec's day boundaries, with
age counted from creation for every type (an episode's event ``timestamp`` does not age it); the
staleness score weighs age and validation high and access low (access lowers the score but never
changes the level); per-namespace threshold overrides from ``ferrex.toml`` and
``--staleness-config`` exactly as the spec's example; every recall result carries freshness
metadata; a recall hit bumps ``last_accessed`` / ``access_count`` (batched, after
``access.flush()``) but never ``last_validated``; and the three explicit validation actions
(``store(supersedes=id)``, ``store(source="memory:<id>")``, reflect ``confirm_ids``) do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.clock import MovableClock
from tests.support.spec import SPEC_TOML

from ferrex.cli.main import _settings
from ferrex.cli.parser import build_parser
from ferrex.config import ConfigError, load_settings
from ferrex.config.lifecycle import StalenessConfig
from ferrex.core.clock import to_iso
from ferrex.core.lifecycle.staleness import assess, staleness_score
from ferrex.core.memory import Memory, MemoryType
from ferrex.core.service import MemoryService
from ferrex.server.calls import run_tool as invoke
from ferrex.server.calls import store_many
from ferrex.server.presenter import iso as shown

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
DEFAULTS = StalenessConfig()


def days_before(days: float) -> datetime:
    return NOW - timedelta(days=days)


def memory(
    kind: str,
    *,
    age: float = 0,
    validated: float | None = None,
    accessed: float | None = None,
    count: int = 0,
    namespace: str = "default",
    created: float | None = None,
) -> Memory:
    """A memory created ``age`` days before NOW (the other signals likewise)."""
    when = days_before(age)
    return Memory(
        id="mem_test",
        namespace=namespace,
        type=MemoryType(kind),
        created_at=days_before(created) if created is not None else when,
        updated_at=when,
        event_time=when,
        content="x",
        last_validated=None if validated is None else days_before(validated),
        last_accessed=None if accessed is None else days_before(accessed),
        access_count=count,
    )


def level(item: Memory, config: StalenessConfig = DEFAULTS) -> str:
    return assess(item, NOW, config).staleness


# --------------------------------------------------------------------------- Layer 2: levels


@pytest.mark.parametrize(
    ("days", "expected"),
    [
        (0, "fresh"),
        (29, "fresh"),
        (30, "aging"),
        (31, "aging"),
        (89, "aging"),
        (90, "stale"),
        (91, "stale"),
    ],
)
def test_episodic_levels_at_the_30_and_90_day_boundaries(days: int, expected: str) -> None:
    assert level(memory("episodic", age=days)) == expected


@pytest.mark.parametrize(
    ("since_validation", "expected"),
    [(89, "fresh"), (90, "aging"), (91, "aging"), (179, "aging"), (180, "stale"), (181, "stale")],
)
def test_semantic_levels_count_days_since_last_validation(
    since_validation: int, expected: str
) -> None:
    # The fact itself is years old: only the validation date decides.
    fact = memory("semantic", age=1000, validated=since_validation)
    assert level(fact) == expected


def test_semantic_fact_never_validated_counts_from_when_it_was_stored() -> None:
    assert level(memory("semantic", age=89)) == "fresh"
    assert level(memory("semantic", age=90)) == "aging"
    assert level(memory("semantic", age=180)) == "stale"


@pytest.mark.parametrize(
    ("days", "expected"),
    [
        (179, "fresh"),
        (180, "aging"),
        (181, "aging"),
        (364, "aging"),
        (365, "stale"),
        (366, "stale"),
    ],
)
def test_procedural_levels_at_the_180_and_365_day_boundaries(days: int, expected: str) -> None:
    assert level(memory("procedural", age=days)) == expected


# --------------------------------------------------------------------------- Layer 2: weights


def test_validation_recency_weighs_as_much_as_age() -> None:
    """A 100-day-old episode is stale; confirmed today it is only aging (age still counts)."""
    assert level(memory("episodic", age=100)) == "stale"
    assert level(memory("episodic", age=100, validated=0)) == "aging"
    assert level(memory("episodic", age=40, validated=0)) == "fresh"
    assert level(memory("episodic", age=100, validated=80)) == "stale"


@pytest.mark.parametrize(
    ("kind", "age", "expected"),
    [
        ("episodic", 29.9, "fresh"),
        ("episodic", 30, "aging"),
        ("episodic", 89.9, "aging"),
        ("episodic", 90, "stale"),
        ("episodic", 95, "stale"),
        ("semantic", 89.9, "fresh"),
        ("semantic", 90, "aging"),
        ("semantic", 179.9, "aging"),
        ("semantic", 180, "stale"),
        ("semantic", 190, "stale"),
        ("procedural", 364.9, "aging"),
        ("procedural", 365, "stale"),
    ],
)
def test_access_never_changes_the_level(kind: str, age: float, expected: str) -> None:
    """Layer 3: retrieval is not validation. However recently and often a memory is recalled,
    its level is the one of its age and validation alone: a stale memory looked at once with
    include_stale=true does not come back to default recalls (and no aging one turns fresh)."""
    for count in (0, 1, 10, 1_000, 10**6):
        for accessed in (None, 0.0, 10.0):
            item = memory(kind, age=age, accessed=accessed, count=count)
            assert level(item) == expected, (count, accessed)


def test_access_lowers_the_score_within_a_level() -> None:
    """The access credit still orders memories of one level (review lists, forget candidates):
    a popular stale episode scores lower than a quiet one, by at most 10%."""
    quiet = staleness_score(memory("episodic", age=95), NOW, DEFAULTS.weights)
    popular = staleness_score(
        memory("episodic", age=95, accessed=0, count=500), NOW, DEFAULTS.weights
    )
    assert quiet == pytest.approx(95)
    assert 0.9 * quiet <= popular < 90 <= quiet  # under the threshold, yet still stale:
    assert level(memory("episodic", age=95, accessed=0, count=500)) == "stale"


@pytest.mark.parametrize(
    ("kind", "age"), [("episodic", 31), ("episodic", 32), ("semantic", 95), ("procedural", 185)]
)
def test_recall_never_makes_an_aging_memory_fresh_again(kind: str, age: int) -> None:
    """Layer 3: retrieval is not validation. Just past the fresh threshold, a memory recalled
    a moment ago and a thousand times stays aging (its score drops under the threshold)."""
    quiet = memory(kind, age=age)
    popular = memory(kind, age=age, accessed=0, count=1_000)
    thresholds = DEFAULTS.thresholds("default", kind)
    assert staleness_score(popular, NOW, DEFAULTS.weights) < thresholds.fresh
    assert level(quiet) == level(popular) == "aging"
    # Validation does refresh it.
    assert level(memory(kind, age=age, validated=0)) == "fresh"


@pytest.mark.parametrize(
    ("days", "expected"),
    [(0, 0.9), (90, 0.9 / 2**0.5), (180, 0.45), (360, 0.225)],
)
def test_fact_confidence_halves_by_the_stale_threshold_without_validation(
    days: float, expected: float
) -> None:
    from dataclasses import replace as with_fields

    from ferrex.core.lifecycle.staleness import effective_confidence

    fact = with_fields(memory("semantic", age=days, created=days), confidence=0.9)
    assert effective_confidence(fact, NOW, DEFAULTS) == pytest.approx(expected)
    # Validation restarts the clock; retrieval does not.
    confirmed = with_fields(fact, last_validated=NOW)
    assert effective_confidence(confirmed, NOW, DEFAULTS) == pytest.approx(0.9)
    popular = with_fields(fact, last_accessed=NOW, access_count=500)
    assert effective_confidence(popular, NOW, DEFAULTS) == pytest.approx(expected)


def test_confidence_decays_slower_where_a_namespace_keeps_facts_longer() -> None:
    from dataclasses import replace as with_fields

    from ferrex.core.lifecycle.staleness import effective_confidence

    config = StalenessConfig.model_validate(
        {"namespaces": {"reference": {"semantic": {"fresh": 365, "aging": 730, "stale": 730}}}}
    )
    fact = with_fields(memory("semantic", age=730, created=730, namespace="reference"))
    assert effective_confidence(fact, NOW, config) == pytest.approx(0.5)
    episode = memory("episodic", age=730)
    assert effective_confidence(episode, NOW, config) == episode.confidence


def test_more_and_more_recent_access_each_lower_the_score() -> None:
    base = staleness_score(memory("episodic", age=60), NOW, DEFAULTS.weights)
    counted = staleness_score(memory("episodic", age=60, count=20), NOW, DEFAULTS.weights)
    more = staleness_score(memory("episodic", age=60, count=80), NOW, DEFAULTS.weights)
    old_hit = staleness_score(memory("episodic", age=60, accessed=40), NOW, DEFAULTS.weights)
    new_hit = staleness_score(memory("episodic", age=60, accessed=1), NOW, DEFAULTS.weights)
    assert base > counted > more
    assert base > old_hit > new_hit


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(["episodic", "semantic", "procedural"]),
    age=st.floats(0, 3000),
    validated=st.one_of(st.none(), st.floats(0, 3000)),
    accessed=st.floats(0, 3000),
    count=st.integers(0, 10**7),
)
def test_access_is_a_low_weight_signal(
    kind: str, age: float, validated: float | None, accessed: float, count: int
) -> None:
    """Whatever the access pattern, it removes at most 10% of the score (0.05 + 0.05)."""
    quiet = memory(kind, age=age, validated=validated)
    busy = replace(quiet, last_accessed=days_before(accessed), access_count=count)
    quiet_score = staleness_score(quiet, NOW, DEFAULTS.weights)
    busy_score = staleness_score(busy, NOW, DEFAULTS.weights)
    assert busy_score <= quiet_score + 1e-9
    assert busy_score >= 0.9 * quiet_score - 1e-9
    assert level(busy) == level(quiet)  # and it never moves the level


@pytest.mark.parametrize("kind", ["episodic", "semantic", "procedural"])
def test_age_counts_from_creation_not_from_the_event_or_a_later_update(kind: str) -> None:
    """Spec: age is "days since creation or last update"; a ferrex row is never updated in
    place, so its creation is its last update. An event dated last year but stored today is a
    new memory; superseding an old row (which touches ``updated_at``) does not make it young."""
    recorded_today = replace(memory(kind, age=0), event_time=days_before(400))
    assert assess(recorded_today, NOW, DEFAULTS).age_days == 0
    assert level(recorded_today) == "fresh"
    superseded_today = replace(memory(kind, age=300), updated_at=NOW, event_time=NOW)
    assert assess(superseded_today, NOW, DEFAULTS).age_days == 300
    assert staleness_score(superseded_today, NOW, DEFAULTS.weights) == pytest.approx(300)


# --------------------------------------------------------------------------- Layer 6: metadata


def test_freshness_metadata_fields() -> None:
    item = memory("episodic", age=45.5, validated=3, accessed=1, count=7)
    fresh = assess(item, NOW, DEFAULTS).to_dict()
    assert fresh == {
        "age_days": 45,
        "last_accessed": to_iso(days_before(1)),
        "last_validated": to_iso(days_before(3)),
        "access_count": 7,
        "staleness": "fresh",
    }


def test_an_invalidated_fact_is_superseded_whatever_its_age() -> None:
    fact = replace(memory("semantic", age=1), t_invalid=days_before(0.5))
    assert level(fact) == "superseded"


# --------------------------------------------------------------------------- configuration


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def defaults_toml(*, fresh: int, aging: int, stale: int) -> str:
    line = f"episodic = {{ fresh = {fresh}, aging = {aging}, stale = {stale} }}"
    return f"[staleness.defaults]\n{line}\n"


def spec_config_from_data_dir(tmp_path: Path) -> StalenessConfig:
    data = tmp_path / "data"
    write(data / "ferrex.toml", SPEC_TOML)
    settings_, warnings = load_settings(cli={"data_dir": str(data)}, environ={})
    assert warnings == []
    return settings_.staleness


@pytest.mark.parametrize(
    ("namespace", "kind", "days", "expected"),
    [
        ("ci-infra", "procedural", 6, "fresh"),
        ("ci-infra", "procedural", 7, "aging"),
        ("ci-infra", "procedural", 29, "aging"),
        ("ci-infra", "procedural", 30, "stale"),
        ("default", "procedural", 30, "fresh"),
        ("ci-infra", "episodic", 31, "aging"),  # types it does not override keep the defaults
        ("ci-infra", "episodic", 90, "stale"),
        ("company-reference", "semantic", 364, "fresh"),
        ("company-reference", "semantic", 400, "aging"),
        ("company-reference", "semantic", 730, "stale"),
        ("default", "semantic", 400, "stale"),
        ("company-reference", "procedural", 200, "aging"),
    ],
)
def test_per_namespace_overrides_from_ferrex_toml(
    tmp_path: Path, namespace: str, kind: str, days: int, expected: str
) -> None:
    config = spec_config_from_data_dir(tmp_path)
    assert level(memory(kind, age=days, namespace=namespace), config) == expected


def test_staleness_config_flag_reads_the_spec_example(tmp_path: Path) -> None:
    path = write(tmp_path / "staleness.toml", SPEC_TOML)
    args = build_parser().parse_args(
        ["--data-dir", str(tmp_path / "data"), "--staleness-config", str(path)]
    )
    settings_, _ = _settings(args)
    config = settings_.staleness
    ci = config.thresholds("ci-infra", "procedural")
    assert (ci.fresh, ci.aging, ci.stale) == (7, 14, 30)
    reference = config.thresholds("company-reference", "semantic")
    assert (reference.fresh, reference.aging, reference.stale) == (365, 730, 730)
    assert level(memory("procedural", age=30, namespace="ci-infra"), config) == "stale"
    assert level(memory("procedural", age=30, namespace="other"), config) == "fresh"


def test_staleness_config_flag_overrides_ferrex_toml(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write(data / "ferrex.toml", defaults_toml(fresh=5, aging=9, stale=9))
    path = write(tmp_path / "s.toml", defaults_toml(fresh=10, aging=20, stale=20))
    settings_, _ = load_settings(cli={"data_dir": str(data)}, environ={}, staleness_path=path)
    assert level(memory("episodic", age=9), settings_.staleness) == "fresh"
    assert level(memory("episodic", age=20), settings_.staleness) == "stale"


def test_thresholds_out_of_order_are_rejected_with_a_message(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.toml", defaults_toml(fresh=90, aging=30, stale=30))
    with pytest.raises(ConfigError, match="fresh <= aging <= stale"):
        load_settings(cli={"data_dir": str(tmp_path / "d")}, environ={}, staleness_path=path)


# --------------------------------------------------------------------------- Layer 3 end to end


ServiceFactory = Callable[..., MemoryService]


@pytest.fixture
def clock() -> MovableClock:
    return MovableClock(NOW)


@pytest.fixture
def svc(make_service: ServiceFactory, clock: MovableClock) -> MemoryService:
    # A long flush interval: only explicit access.flush() calls write access bumps.
    return make_service(clock=clock, lifecycle={"access_flush_seconds": 60})


def row(service: MemoryService, memory_id: str) -> Memory:
    found = service.meta.get_memory(memory_id)
    assert found is not None
    return found


def recalled(service: MemoryService, query: str, **extra: Any) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in invoke(service, "recall", {"query": query, **extra})["results"]}


def test_every_recall_result_carries_freshness(svc: MemoryService, clock: MovableClock) -> None:
    invoke(svc, "store", {"content": "the nightly backup job moved to 02:00 UTC"})
    clock.advance(40)
    invoke(
        svc, "store", {"subject": "backup-job", "predicate": "runs_on", "object": "the ops-2 host"}
    )
    invoke(
        svc,
        "store",
        {
            "type": "procedural",
            "name": "restore-backup",
            "steps": ["stop the api", "restore the snapshot", "start the api"],
        },
    )
    results = invoke(svc, "recall", {"query": "backup job", "limit": 10})["results"]
    assert len(results) == 3
    for result in results:
        assert set(result["freshness"]) == {
            "age_days",
            "last_accessed",
            "last_validated",
            "access_count",
            "staleness",
        }
    by_type = {r["type"]: r["freshness"] for r in results}
    assert by_type["episodic"]["age_days"] == 40 and by_type["episodic"]["staleness"] == "aging"
    assert by_type["semantic"]["staleness"] == "fresh"
    assert by_type["procedural"]["staleness"] == "fresh"


def test_recall_bumps_access_in_batches_and_never_validates(
    svc: MemoryService, clock: MovableClock
) -> None:
    stored = invoke(
        svc, "store", {"subject": "api-server", "predicate": "uses", "object": "tokio 1.38"}
    )
    clock.advance(3)
    invoke(svc, "recall", {"query": "what runtime does api-server use"})
    invoke(svc, "recall", {"query": "api-server tokio"})
    untouched = row(svc, stored["id"])
    assert (untouched.access_count, untouched.last_accessed) == (0, None)  # not on the hot path
    assert svc.access.flush() == 1
    bumped = row(svc, stored["id"])
    assert bumped.access_count == 2
    assert bumped.last_accessed == clock.current
    assert bumped.last_validated is None
    fresh = recalled(svc, "api-server tokio")[stored["id"]]["freshness"]
    assert fresh["access_count"] == 2
    assert fresh["last_accessed"] == shown(clock.current)
    assert fresh["last_validated"] is None


def test_a_popular_fact_still_goes_stale_without_validation(
    svc: MemoryService, clock: MovableClock
) -> None:
    popular = invoke(
        svc, "store", {"subject": "billing-db", "predicate": "runs", "object": "postgres 15"}
    )
    ignored = invoke(
        svc, "store", {"subject": "search-index", "predicate": "runs", "object": "opensearch 2"}
    )
    for _ in range(17):  # recalled every ten days for 170 days
        clock.advance(10)
        invoke(
            svc, "recall", {"query": "what does billing-db run", "types": ["semantic"], "limit": 1}
        )
        svc.access.flush()
    query = {"query": "which database or search engine runs", "types": ["semantic"], "limit": 5}
    clock.advance(9)  # day 179: both aging, the popular one with the lower score
    at_179 = invoke(svc, "recall", query)
    assert {r["id"] for r in at_179["results"]} == {popular["id"], ignored["id"]}
    assert {r["freshness"]["staleness"] for r in at_179["results"]} == {"aging"}
    scores = {
        m: assess(row(svc, m), svc.now(), svc.settings.staleness).score
        for m in (popular["id"], ignored["id"])
    }
    assert scores[popular["id"]] < scores[ignored["id"]]
    clock.advance(1)  # day 180: the threshold, whatever the popularity
    at_180 = invoke(svc, "recall", query)
    assert at_180["results"] == []
    assert at_180.get("stale_held_back", 0) == 2
    assert row(svc, popular["id"]).last_validated is None
    assert row(svc, popular["id"]).access_count >= 17
    shown = recalled(svc, "which database or search engine runs", include_stale=True)
    assert shown[popular["id"]]["freshness"]["staleness"] == "stale"
    assert shown[ignored["id"]]["freshness"]["staleness"] == "stale"


def test_supersede_validates_the_replaced_memory(svc: MemoryService, clock: MovableClock) -> None:
    old = invoke(
        svc, "store", {"subject": "frontend", "predicate": "built_with", "object": "react 17"}
    )
    clock.advance(100)
    assert level_of(svc, old["id"]) == "aging"
    new = invoke(
        svc,
        "store",
        {
            "subject": "frontend",
            "predicate": "built_with",
            "object": "react 18",
            "supersedes": old["id"],
        },
    )
    assert old["id"] in new["superseded"]
    assert row(svc, old["id"]).last_validated == clock.current
    history = recalled(svc, "frontend built with react", include_invalidated=True)
    assert history[old["id"]]["freshness"]["last_validated"] == shown(clock.current)
    assert history[old["id"]]["freshness"]["staleness"] == "superseded"
    assert history[new["id"]]["freshness"]["staleness"] == "fresh"


@pytest.mark.parametrize("scheme", ["memory", "episodic"])
def test_citing_a_memory_as_source_validates_it(
    svc: MemoryService, clock: MovableClock, scheme: str
) -> None:
    episode = invoke(
        svc, "store", {"content": "we load-tested the checkout flow at 5k requests per second"}
    )
    clock.advance(50)
    assert level_of(svc, episode["id"]) == "aging"
    fact = invoke(
        svc,
        "store",
        {
            "subject": "checkout-flow",
            "predicate": "handles",
            "object": "5k rps",
            "source": f"{scheme}:{episode['id']}",
        },
    )
    assert fact["validated"] == [episode["id"]]
    assert row(svc, episode["id"]).last_validated == clock.current
    # Age 50, validated today: (50 + 0) / 2 = 25 effective days, fresh again.
    assert level_of(svc, episode["id"]) == "fresh"
    entries = svc.meta.audit_entries("default", "validate")
    assert [(e["memory_id"], e["other_id"]) for e in entries] == [(episode["id"], fact["id"])]


def test_reflect_confirmation_validates(svc: MemoryService, clock: MovableClock) -> None:
    fact = invoke(
        svc, "store", {"subject": "payments", "predicate": "owned_by", "object": "team atlas"}
    )
    clock.advance(120)
    assert level_of(svc, fact["id"]) == "aging"
    answer = invoke(svc, "reflect", {"confirm_ids": [fact["id"], "mem_000000000000deadbeef"]})
    assert answer["confirmed"] == [fact["id"]]
    assert answer["not_found"] == ["mem_000000000000deadbeef"]
    assert row(svc, fact["id"]).last_validated == clock.current
    result = recalled(svc, "who owns payments")[fact["id"]]
    assert result["freshness"]["staleness"] == "fresh"
    assert result["freshness"]["last_validated"] == shown(clock.current)


def test_restating_a_known_fact_validates_it(svc: MemoryService, clock: MovableClock) -> None:
    """Spec, conflict edge cases: a duplicate fact bumps last_validated instead of storing."""
    fact = invoke(
        svc, "store", {"subject": "api-gateway", "predicate": "runs_on", "object": "envoy"}
    )
    clock.advance(100)
    assert level_of(svc, fact["id"]) == "aging"
    again = invoke(
        svc, "store", {"subject": "api-gateway", "predicate": "runs_on", "object": "Envoy"}
    )
    assert again["status"] == "duplicate" and again["id"] == fact["id"]
    assert row(svc, fact["id"]).last_validated == clock.current
    assert level_of(svc, fact["id"]) == "fresh"


def level_of(service: MemoryService, memory_id: str) -> str:
    return assess(row(service, memory_id), service.now(), service.settings.staleness).staleness


def test_held_back_counts_only_stale_memories_that_would_have_been_results(
    svc: MemoryService, clock: MovableClock
) -> None:
    """The count tells the agent what include_stale=true would add to *these* results, not how
    many stale memories the index returned for the query (the dense channel returns any)."""
    unrelated = [
        "baked sourdough bread with rye flour on the weekend",
        "the cat knocked a plant off the windowsill",
        "lost a chess game with the french defence",
        "repainted the garden fence dark green",
        "watched a documentary about octopus intelligence",
    ]
    store_many(svc, [{"content": text} for text in unrelated])
    clock.advance(200)  # all five are stale now
    upgrade = invoke(
        svc, "store", {"content": "upgraded the kubernetes cluster to 1.31 with kubeadm"}
    )
    one = invoke(svc, "recall", {"query": "kubernetes cluster upgrade", "limit": 1})
    assert [r["id"] for r in one["results"]] == [upgrade["id"]]
    assert one.get("stale_held_back", 0) == 0 and "note" not in one
    # With room for three results, include_stale=true would add two stale ones: that many.
    three = invoke(svc, "recall", {"query": "kubernetes cluster upgrade", "limit": 3})
    everything = invoke(
        svc, "recall", {"query": "kubernetes cluster upgrade", "limit": 3, "include_stale": True}
    )
    added = [r for r in everything["results"] if r["freshness"]["staleness"] == "stale"]
    assert three.get("stale_held_back", 0) == len(added) == 2
