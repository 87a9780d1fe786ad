"""Conflict detection and temporal validity (spec "Conflict Resolution", Layers 1 and 4).

Proves, on the pure functions, the staged object similarity (exact / number guard / string ratio
>= 0.95 duplicate, < 0.5 different, in between decided by the real MiniLM cosine) and every outcome
of ``decide``; and on a real MemoryService: (subject, predicate) matches invalidate the old fact
with t_invalid = the incoming t_valid, historical and as_of queries, supersedes bypassing the
check (unknown id -> clear error, nothing written), multi-valued predicates (configured list and
explicit flag), "same confidence, different dates: the more recent wins", duplicates keeping the
higher confidence and bumping last_validated, lower-confidence contradictions flagged at query
time and in reflect, namespaces never crossing, and every transition written to the audit log.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from rapidfuzz import fuzz
from tests.support.answers import conforms
from tests.support.harness import ServiceFactory
from tests.support.typed import stored

from ferrex.core.clock import to_iso
from ferrex.core.errors import FerrexError
from ferrex.core.ingest.conflict import (
    Verdict,
    contradiction_groups,
    decide,
    normalize_object,
    object_similarity,
    value_name,
)
from ferrex.core.memory import Memory, MemoryType
from ferrex.core.service import MemoryService
from ferrex.embed.embedder import FastEmbedEmbedder
from ferrex.server.calls import run_tool as invoke
from ferrex.server.calls import store_many
from ferrex.server.presenter import iso as shown

T0 = datetime(2026, 4, 10, 12, 0, tzinfo=UTC)
JAN = datetime(2026, 1, 15, tzinfo=UTC)
MAR = datetime(2026, 3, 1, tzinfo=UTC)
APR = datetime(2026, 4, 1, tzinfo=UTC)
FEB = datetime(2026, 2, 1, tzinfo=UTC)
# Measured with MiniLM: string ratio in [0.5, 0.95), so the embedding decides.
MIDDLE_SAME = ("nginx reverse proxy", "reverse proxy nginx")  # cosine ~0.99
MIDDLE_DIFFERENT = ("the tokio runtime", "tokio runtime library")  # cosine ~0.84


class Clock:
    """A settable clock (the service reads it through ``clock()``)."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now


def fact(subject: str, predicate: str, obj: str, **extra: Any) -> dict[str, Any]:
    return {"subject": subject, "predicate": predicate, "object": obj, **extra}


def iso(moment: datetime) -> str:
    return to_iso(moment)


def make_fact(
    memory_id: str,
    obj: str,
    *,
    confidence: float = 0.9,
    t_valid: datetime = JAN,
    subject_entity_id: int = 1,
    **extra: Any,
) -> Memory:
    return Memory(
        id=memory_id,
        namespace="default",
        type=MemoryType.SEMANTIC,
        created_at=t_valid,
        updated_at=t_valid,
        event_time=t_valid,
        subject="api-server",
        predicate="uses",
        predicate_canonical="depends_on",
        object=obj,
        subject_entity_id=subject_entity_id,
        confidence=confidence,
        t_valid=t_valid,
        **extra,
    )


@pytest.fixture
def cosine(embedder: FastEmbedEmbedder) -> Callable[[str, str], float]:
    def real_cosine(a: str, b: str) -> float:
        va, vb = embedder.embed_documents([a, b])
        return float(np.dot(va, vb))

    return real_cosine


@pytest.fixture
def clocked(make_service: ServiceFactory) -> tuple[MemoryService, Clock]:
    clock = Clock(T0)
    return make_service(clock=clock), clock


def similarity(
    a: str, b: str, cosine: Callable[[str, str], float], calls: list[tuple[str, str]] | None = None
) -> Any:
    def recording(x: str, y: str) -> float:
        if calls is not None:
            calls.append((x, y))
        return cosine(x, y)

    return object_similarity(
        a, b, different_below=0.5, duplicate_at=0.95, embedding_cosine=recording
    )


def run_decide(incoming: str, current: list[Memory], cosine: Any, **overrides: Any) -> Any:
    arguments: dict[str, Any] = {
        "incoming_object": incoming,
        "incoming_confidence": 0.9,
        "incoming_t_valid": APR,
        "current": current,
        "multi_valued": False,
        "duplicate_threshold": 0.95,
        "different_threshold": 0.5,
        "embedding_duplicate_threshold": 0.95,
        "embedding_cosine": cosine,
    }
    arguments.update(overrides)
    return decide(**arguments)


def current_objects(service: MemoryService, subject: str) -> set[str]:
    rows = semantic_rows(service).values()
    return {m.object or "" for m in rows if m.subject == subject and m.t_invalid is None}


def semantic_rows(service: MemoryService, namespace: str = "default") -> dict[str, Memory]:
    rows = service.meta.memories_in_namespace(namespace, where="type = 'semantic'")
    return {m.id: m for m in rows}


def recall_ids(service: MemoryService, **arguments: Any) -> set[str]:
    response = invoke(service, "recall", {"limit": 20, **arguments})
    return {r["id"] for r in response["results"]}


def audit(service: MemoryService, action: str, namespace: str = "default") -> list[dict[str, Any]]:
    return service.meta.audit_entries(namespace, action)


# --------------------------------------------------------------------------- object similarity


def test_exact_object_after_normalisation_is_a_duplicate(cosine: Any) -> None:
    calls: list[tuple[str, str]] = []
    result = similarity(" Tokio  1.38", "tokio 1.38", cosine, calls)
    assert (result.score, result.method) == (1.0, "exact") and calls == []


def test_different_numbers_are_different_values(cosine: Any) -> None:
    calls: list[tuple[str, str]] = []
    result = similarity("tokio 1.38", "tokio 1.36", cosine, calls)
    assert result.score < 0.5 and result.method == "numbers" and calls == []


def test_clearly_different_strings_skip_the_embedding(cosine: Any) -> None:
    calls: list[tuple[str, str]] = []
    result = similarity("mysql", "postgres", cosine, calls)
    assert result.method == "string" and result.score < 0.5 and calls == []


def test_near_identical_strings_are_duplicates_without_embedding(cosine: Any) -> None:
    calls: list[tuple[str, str]] = []
    result = similarity("PostgreSQL databases", "PostgreSQL database", cosine, calls)
    assert result.method == "string" and result.score >= 0.95 and calls == []


@pytest.mark.parametrize("pair", [MIDDLE_SAME, MIDDLE_DIFFERENT])
def test_middle_ground_falls_back_to_the_embedding(pair: tuple[str, str], cosine: Any) -> None:
    a, b = pair
    ratio = fuzz.ratio(normalize_object(a), normalize_object(b)) / 100
    assert 0.5 <= ratio < 0.95
    calls: list[tuple[str, str]] = []
    result = similarity(a, b, cosine, calls)
    assert result.method == "embedding" and calls == [(a, b)]
    assert result.score == pytest.approx(cosine(a, b))


def test_middle_pairs_land_on_both_sides_of_095(cosine: Any) -> None:
    assert similarity(*MIDDLE_SAME, cosine).score >= 0.95
    assert similarity(*MIDDLE_DIFFERENT, cosine).score < 0.95


def test_string_stage_boundary_at_different_threshold(cosine: Any) -> None:
    a, b = MIDDLE_DIFFERENT
    ratio = fuzz.ratio(normalize_object(a), normalize_object(b)) / 100
    at = object_similarity(a, b, different_below=ratio, duplicate_at=0.95, embedding_cosine=cosine)
    above = object_similarity(
        a, b, different_below=ratio + 0.001, duplicate_at=0.95, embedding_cosine=cosine
    )
    assert at.method == "embedding"  # < 0.5 is strict: a ratio equal to it is middle ground
    assert above.method == "string"


# --------------------------------------------------------------------------- decide()


def test_no_current_fact_is_new(cosine: Any) -> None:
    assert run_decide("tokio 1.38", [], cosine).outcome is Verdict.NEW


def test_same_value_is_a_duplicate_of_the_closest_fact(cosine: Any) -> None:
    existing = make_fact("mem_a", "tokio 1.38")
    decision = run_decide("Tokio 1.38", [existing], cosine)
    assert decision.outcome is Verdict.DUPLICATE and decision.duplicate_of is existing


def test_different_value_invalidates_every_current_fact(cosine: Any) -> None:
    old = make_fact("mem_a", "tokio 1.36")
    decision = run_decide("tokio 1.38", [old], cosine)
    assert decision.outcome is Verdict.SUPERSEDED and decision.invalidate == [old]


def test_same_confidence_older_incoming_becomes_history(cosine: Any) -> None:
    current = make_fact("mem_a", "tokio 1.38", t_valid=MAR)
    decision = run_decide("tokio 1.36", [current], cosine, incoming_t_valid=FEB)
    assert decision.outcome is Verdict.HISTORICAL
    assert decision.new_t_invalid == MAR and decision.superseded_by_existing is current


def test_same_confidence_newer_incoming_wins(cosine: Any) -> None:
    current = make_fact("mem_a", "tokio 1.36", t_valid=MAR)
    decision = run_decide("tokio 1.38", [current], cosine, incoming_t_valid=APR)
    assert decision.outcome is Verdict.SUPERSEDED


def test_lower_confidence_incoming_is_a_contradiction(cosine: Any) -> None:
    current = make_fact("mem_a", "tokio 1.36", confidence=0.95)
    decision = run_decide("tokio 1.38", [current], cosine, incoming_confidence=0.6)
    assert decision.outcome is Verdict.CONTRADICTION and decision.contradicts == [current]


def test_multi_valued_keeps_both(cosine: Any) -> None:
    current = make_fact("mem_a", "serde")
    decision = run_decide("tokio", [current], cosine, multi_valued=True)
    assert decision.outcome is Verdict.MULTI_VALUED and decision.invalidate == []
    # ...but a repeated value is still a duplicate.
    again = run_decide("serde", [current], cosine, multi_valued=True)
    assert again.outcome is Verdict.DUPLICATE


def test_contradiction_groups_ignore_invalid_multi_valued_and_equal_objects() -> None:
    a = make_fact("mem_a", "tokio 1.36")
    b = make_fact("mem_b", "tokio 1.38")
    old = make_fact("mem_c", "tokio 1.30", t_invalid=MAR)
    same = make_fact("mem_d", "serde", subject_entity_id=2)
    same_again = make_fact("mem_e", " Serde", subject_entity_id=2)
    multi = make_fact("mem_f", "x", subject_entity_id=3, multi_valued=True)
    multi_b = make_fact("mem_g", "y", subject_entity_id=3, multi_valued=True)
    groups = contradiction_groups([a, b, old, same, same_again, multi, multi_b])
    assert list(groups) == [(1, "depends_on")]
    assert [m.id for m in groups[(1, "depends_on")]] == ["mem_a", "mem_b"]


# --------------------------------------------------------------------------- service: supersede


def test_exact_subject_predicate_match_supersedes(clocked: tuple[MemoryService, Clock]) -> None:
    service, _ = clocked
    old = invoke(service, "store", fact("api-server", "uses", "tokio 1.36", t_valid=iso(JAN)))
    new = invoke(service, "store", fact("API Server", "uses", "tokio 1.38", t_valid=iso(APR)))
    assert new["status"] == "superseded" and new["superseded"] == [old["id"]]
    rows = semantic_rows(service)
    assert rows[old["id"]].t_invalid == APR  # = the incoming fact's t_valid
    assert rows[old["id"]].superseded_by == new["id"]
    assert rows[new["id"]].t_valid == APR and rows[new["id"]].t_invalid is None


def test_t_invalid_defaults_to_now_when_no_t_valid_given(
    clocked: tuple[MemoryService, Clock],
) -> None:
    service, clock = clocked
    old = invoke(service, "store", fact("api-server", "uses", "tokio 1.36"))
    clock.now = T0 + timedelta(hours=3)
    invoke(service, "store", fact("api-server", "depends-on", "tokio 1.38"))
    assert semantic_rows(service)[old["id"]].t_invalid == T0 + timedelta(hours=3)


def test_superseded_fact_is_history_not_current(clocked: tuple[MemoryService, Clock]) -> None:
    service, _ = clocked
    old = invoke(service, "store", fact("api-server", "uses", "tokio 1.36", t_valid=iso(JAN)))
    new = invoke(service, "store", fact("api-server", "depends-on", "tokio 1.38", t_valid=iso(APR)))
    query = "what does api-server depend on"
    assert recall_ids(service, query=query) == {new["id"]}
    history = invoke(service, "recall", {"query": query, "include_invalidated": True})["results"]
    by_id = {r["id"]: r for r in history}
    assert set(by_id) == {old["id"], new["id"]}
    assert by_id[old["id"]]["freshness"]["staleness"] == "superseded"
    assert by_id[old["id"]]["t_invalid"] == shown(APR)
    assert by_id[old["id"]]["superseded_by"] == new["id"]
    assert by_id[new["id"]]["freshness"]["staleness"] == "fresh"


def test_an_older_value_added_later_ends_where_the_next_known_value_began(
    clocked: tuple[MemoryService, Clock],
) -> None:
    """v2 (Feb) superseded by v3 (Apr); then v1 (Jan) arrives as history. It must end in Feb,
    where v2 began, not in Apr: as_of in March sees v2 alone."""
    service, _ = clocked
    query = "api-server runtime"
    v2 = invoke(service, "store", fact("api-server", "runtime", "node 18", t_valid=iso(FEB)))
    v3 = invoke(service, "store", fact("api-server", "runtime", "node 20", t_valid=iso(APR)))
    v1 = invoke(service, "store", fact("api-server", "runtime", "node 16", t_valid=iso(JAN)))
    assert conforms("store", v1)["status"] == "historical" and v1["superseded_by"] == v2["id"]
    rows = semantic_rows(service)
    assert rows[v1["id"]].t_invalid == FEB
    assert recall_ids(service, query=query, as_of=iso(JAN + timedelta(days=1))) == {v1["id"]}
    assert recall_ids(service, query=query, as_of=iso(MAR)) == {v2["id"]}
    assert recall_ids(service, query=query, as_of=iso(T0)) == {v3["id"]}


def test_as_of_returns_what_was_valid_then(clocked: tuple[MemoryService, Clock]) -> None:
    service, _ = clocked
    old = invoke(service, "store", fact("api-server", "uses", "tokio 1.36", t_valid=iso(JAN)))
    new = invoke(service, "store", fact("api-server", "uses", "tokio 1.38", t_valid=iso(APR)))
    query = "api-server tokio"
    assert recall_ids(service, query=query, as_of=iso(MAR)) == {old["id"]}
    assert recall_ids(service, query=query, as_of=iso(APR)) == {new["id"]}
    assert recall_ids(service, query=query, as_of=iso(APR - timedelta(seconds=1))) == {old["id"]}
    assert recall_ids(service, query=query, as_of=iso(JAN - timedelta(days=1))) == set()


def test_audit_logs_which_fact_replaced_which_and_why(clocked: tuple[MemoryService, Clock]) -> None:
    service, _ = clocked
    old = invoke(service, "store", fact("api-server", "uses", "tokio 1.36", t_valid=iso(JAN)))
    new = invoke(service, "store", fact("api-server", "uses", "tokio 1.38", t_valid=iso(APR)))
    [entry] = audit(service, "supersede")
    assert (entry["memory_id"], entry["other_id"]) == (old["id"], new["id"])
    assert entry["detail"] == {"reason": "superseded"} and entry["at"] == iso(T0)
    assert {e["memory_id"] for e in audit(service, "store")} == {old["id"], new["id"]}


# --------------------------------------------------------------------------- service: supersedes=


def test_supersedes_bypasses_the_similarity_check(clocked: tuple[MemoryService, Clock]) -> None:
    service, clock = clocked
    old = invoke(service, "store", fact("api-server", "version", "2.1"))
    clock.now = T0 + timedelta(days=1)
    # Identical value: without supersedes this is a duplicate; with it, a direct replacement.
    new = invoke(service, "store", fact("api-server", "version", "2.1", supersedes=old["id"]))
    assert new["status"] == "superseded" and new["superseded"] == [old["id"]]
    rows = semantic_rows(service)
    assert rows[old["id"]].t_invalid == T0 + timedelta(days=1)
    assert rows[old["id"]].last_validated == T0 + timedelta(days=1)
    assert rows[new["id"]].t_invalid is None
    [entry] = audit(service, "supersede")
    assert entry["detail"] == {"reason": "explicit"} and entry["other_id"] == new["id"]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("version", "2.4.1"), ("version_date", "2024-03-01")),
        (("requires", "postgres"), ("requires_auth", "true")),
        (("end_time", "17:00"), ("end_date", "2025-06-30")),
        (("min_version", "1.2"), ("max_version", "2.0")),
    ],
)
def test_a_look_alike_predicate_is_another_relation_not_a_supersede(
    clocked: tuple[MemoryService, Clock],
    first: tuple[str, str],
    second: tuple[str, str],
) -> None:
    service, _ = clocked
    old = invoke(service, "store", fact("web-app", *first))
    new = stored(service, fact("web-app", *second))
    assert new.status == "stored", new
    assert new.predicate_resolved_by in {"new", "synonym"}
    rows = semantic_rows(service)
    assert rows[old["id"]].t_invalid is None and rows[new.id].t_invalid is None


def test_a_near_duplicate_under_another_predicate_is_refused_with_its_id(
    clocked: tuple[MemoryService, Clock],
) -> None:
    """The triple's cosine cannot tell a reworded relation from another one ("previous release
    version"): never merge silently; refuse loudly, naming the fact to supersede."""
    service, clock = clocked
    old = invoke(service, "store", fact("billing-api", "database version", "PostgreSQL 14"))
    clock.now = T0 + timedelta(days=1)
    with pytest.raises(FerrexError) as refused:
        invoke(service, "store", fact("billing-api", "db version", "PostgreSQL 14"))
    assert refused.value.code == "duplicate"
    assert refused.value.details["existing_id"] == old["id"]
    assert f'supersedes="{old["id"]}"' in refused.value.message
    assert semantic_rows(service)[old["id"]].t_invalid is None


def test_a_backdated_supersede_never_inverts_the_old_interval(
    clocked: tuple[MemoryService, Clock],
) -> None:
    service, clock = clocked
    old = invoke(service, "store", fact("api-server", "region", "eu-west", t_valid=iso(T0)))
    clock.now = T0 + timedelta(days=2)
    earlier = iso(T0 - timedelta(days=30))
    new = invoke(
        service,
        "store",
        fact("api-server", "region", "us-east", t_valid=earlier, supersedes=old["id"]),
    )
    assert new["status"] == "superseded"
    rows = semantic_rows(service)
    # Closed where it began (an empty interval), not 30 days before it began.
    assert rows[old["id"]].t_invalid == rows[old["id"]].t_valid == T0
    assert rows[new["id"]].t_valid == T0 - timedelta(days=30)


def test_supersedes_works_across_predicates(clocked: tuple[MemoryService, Clock]) -> None:
    service, _ = clocked
    old = invoke(service, "store", fact("api-server", "license", "MIT"))
    new = invoke(
        service, "store", fact("api-server", "relicensed_as", "Apache-2.0", supersedes=old["id"])
    )
    assert semantic_rows(service)[old["id"]].superseded_by == new["id"]


@pytest.mark.parametrize("namespace_of_target", ["default", "other"])
def test_supersedes_unknown_id_is_a_clear_error_and_writes_nothing(
    clocked: tuple[MemoryService, Clock], namespace_of_target: str
) -> None:
    service, _ = clocked
    target = invoke(
        service, "store", fact("api-server", "uses", "tokio", namespace=namespace_of_target)
    )
    unknown = "mem_000000000000deadbeef" if namespace_of_target == "default" else target["id"]
    before = (service.meta.count_memories(), len(service.meta.audit_entries(limit=1000)))
    points = service.index.points_by_memory()
    with pytest.raises(FerrexError) as error:
        invoke(
            service,
            "store",
            fact("api-server", "uses", "axum", supersedes=unknown, entities=["axum"]),
        )
    assert error.value.code == "not_found" and unknown in error.value.message
    assert "Nothing was stored" in error.value.message
    after = (service.meta.count_memories(), len(service.meta.audit_entries(limit=1000)))
    assert after == before and service.index.points_by_memory() == points
    assert service.meta.entity_by_name("default", "axum") is None
    assert service.meta.get_memory(target["id"]).t_invalid is None


def test_superseding_a_value_already_replaced_is_refused_with_the_current_id(
    clocked: tuple[MemoryService, Clock],
) -> None:
    """supersedes names a fact that is no longer current: replacing it again would leave two
    current values (and report a supersede that did not happen), so the store is refused with
    the id of today's value, and nothing changes."""
    service, _ = clocked
    first = invoke(service, "store", fact("svc", "version", "1.0", t_valid="2026-01-01"))
    second = invoke(service, "store", fact("svc", "version", "2.0", t_valid="2026-02-01"))
    assert second["superseded"] == [first["id"]]
    before = service.meta.count_memories()
    with pytest.raises(FerrexError) as error:
        invoke(service, "store", fact("svc", "version", "3.0", supersedes=first["id"]))
    assert error.value.code == "not_current"
    assert error.value.details["current_id"] == second["id"]
    assert second["id"] in error.value.message and "Nothing was stored" in error.value.message
    assert service.meta.count_memories() == before
    assert service.meta.get_memory(second["id"]).t_invalid is None
    # Superseding the current value works.
    third = invoke(service, "store", fact("svc", "version", "3.0", supersedes=second["id"]))
    assert third["superseded"] == [second["id"]]


@pytest.mark.parametrize(
    "incoming",
    [
        {"content": "we decided to stop deploying on fridays"},
        {"type": "procedural", "name": "deploy", "steps": ["build", "ship"]},
    ],
)
def test_supersedes_never_crosses_memory_types(
    clocked: tuple[MemoryService, Clock], incoming: dict[str, Any]
) -> None:
    service, _ = clocked
    target = invoke(service, "store", fact("api-server", "deploy day", "friday"))
    with pytest.raises(FerrexError) as error:
        invoke(service, "store", {**incoming, "supersedes": target["id"]})
    assert error.value.code == "invalid_params"
    assert error.value.details["field"] == "supersedes"
    assert service.meta.get_memory(target["id"]).t_invalid is None
    assert service.meta.count_memories() == 1


@pytest.mark.parametrize(
    ("value", "name"),
    [
        ("FastAPI 0.100", "fastapi"),
        ("tokio 1.36", "tokio"),
        ("Django >=4.2", "django"),
        ("react@18.2.0", "react"),
        ("node v20", "node"),
        ("PostgreSQL version 15", "postgresql"),
        ("1.38", ""),
    ],
)
def test_value_name_drops_the_version(value: str, name: str) -> None:
    assert value_name(value) == name


def test_dependencies_of_other_names_stay_current_and_a_new_version_replaces_its_own(
    make_service: ServiceFactory,
) -> None:
    """With depends_on keyed (``conflict.keyed_predicates``, opt-in: the spec's default is one
    value per subject + predicate) the relation holds several packages: FastAPI and pydantic
    are both current; pydantic 2.7 replaces pydantic 2.5 and leaves FastAPI alone; nothing is
    flagged as a contradiction; "(X, uses, v1) then (X, depends-on, v2)" still supersedes."""
    service = make_service(clock=Clock(T0), conflict={"keyed_predicates": ["depends_on"]})
    fastapi = invoke(
        service, "store", fact("atlas-api", "uses", "FastAPI 0.110", t_valid="2024-01-10")
    )
    old = invoke(
        service, "store", fact("atlas-api", "depends on", "pydantic 2.5", t_valid="2024-01-10")
    )
    assert old["status"] == "stored" and old["also_current"] == [fastapi["id"]]
    new = invoke(
        service, "store", fact("atlas-api", "requires", "pydantic 2.7", t_valid="2024-06-01")
    )
    assert new["status"] == "superseded" and new["superseded"] == [old["id"]]
    assert new["also_current"] == [fastapi["id"]]
    assert current_objects(service, "atlas-api") == {"FastAPI 0.110", "pydantic 2.7"}
    results = invoke(
        service, "recall", {"query": "which pydantic does atlas-api depend on", "limit": 5}
    )
    assert old["id"] not in [r["id"] for r in results["results"]]
    assert not any(r.get("contradiction") for r in results["results"])
    assert invoke(service, "reflect", {})["contradictions"] == []
    first = invoke(service, "store", fact("X", "uses", "v1"))
    second = invoke(service, "store", fact("X", "depends-on", "v2"))
    assert second["superseded"] == [first["id"]]


def test_an_explicit_multi_valued_flag_keeps_even_same_named_values(
    make_service: ServiceFactory,
) -> None:
    service = make_service(clock=Clock(T0), conflict={"keyed_predicates": ["depends_on"]})
    invoke(service, "store", fact("lab", "uses", "python 3.11"))
    both = invoke(service, "store", fact("lab", "uses", "python 3.12", multi_valued=True))
    assert both["status"] == "stored" and both["multi_valued"] is True
    assert current_objects(service, "lab") == {"python 3.11", "python 3.12"}


# --------------------------------------------------------------------------- service: dates


def test_same_confidence_more_recent_wins_both_orders(clocked: tuple[MemoryService, Clock]) -> None:
    service, _ = clocked
    current = invoke(service, "store", fact("api-server", "uses", "tokio 1.38", t_valid=iso(MAR)))
    older = invoke(service, "store", fact("api-server", "uses", "tokio 1.36", t_valid=iso(FEB)))
    assert older["status"] == "historical" and older["superseded_by"] == current["id"]
    rows = semantic_rows(service)
    assert rows[current["id"]].t_invalid is None
    assert rows[older["id"]].t_invalid == MAR and rows[older["id"]].t_valid == FEB
    assert recall_ids(service, query="api-server tokio") == {current["id"]}
    assert recall_ids(service, query="api-server tokio", as_of=iso(FEB)) == {older["id"]}
    [entry] = audit(service, "historical")
    assert (entry["memory_id"], entry["other_id"]) == (older["id"], current["id"])
    newer = invoke(service, "store", fact("api-server", "uses", "tokio 1.40", t_valid=iso(APR)))
    assert newer["status"] == "superseded" and newer["superseded"] == [current["id"]]


# --------------------------------------------------------------------------- service: duplicates


def test_duplicate_keeps_higher_confidence_and_bumps_last_validated(
    clocked: tuple[MemoryService, Clock],
) -> None:
    service, clock = clocked
    original = invoke(service, "store", fact("api-server", "uses", "tokio 1.38", confidence=0.6))
    count = service.meta.count_memories()
    clock.now = T0 + timedelta(days=2)
    higher = stored(service, fact("api-server", "depends_on", " Tokio 1.38", confidence=0.9))
    assert higher.status == "duplicate" and higher.duplicate_of == original["id"]
    assert higher.id == original["id"] and higher.confidence == 0.9
    clock.now = T0 + timedelta(days=5)
    lower = stored(service, fact("api-server", "uses", "tokio 1.38", confidence=0.3))
    assert lower.status == "duplicate" and lower.confidence == 0.9
    row = service.meta.get_memory(original["id"])
    assert row.confidence == 0.9 and row.last_validated == T0 + timedelta(days=5)
    assert service.meta.count_memories() == count
    assert len(service.index.points_by_memory()) == count
    assert [e["memory_id"] for e in audit(service, "duplicate")] == [original["id"]] * 2


def test_middle_ground_objects_are_decided_by_embedding(
    clocked: tuple[MemoryService, Clock],
) -> None:
    service, _ = clocked
    proxy = invoke(service, "store", fact("edge", "runs", MIDDLE_SAME[0]))
    again = stored(service, fact("edge", "runs", MIDDLE_SAME[1]))
    assert again.status == "duplicate" and again.similarity_method == "embedding"
    assert again.duplicate_of == proxy["id"]
    runtime = invoke(service, "store", fact("worker", "runs", MIDDLE_DIFFERENT[0]))
    other = stored(service, fact("worker", "runs", MIDDLE_DIFFERENT[1]))
    assert other.status == "superseded" and other.superseded == [runtime["id"]]
    assert other.similarity_method == "embedding"
    assert other.similarity is not None and other.similarity < 0.95


# --------------------------------------------------------------------------- service: multi-valued


def test_configured_multi_valued_predicate_keeps_every_value(make_service: ServiceFactory) -> None:
    service = make_service(conflict={"multi_valued_predicates": ["has_contributor"]})
    alice = invoke(service, "store", fact("api-server", "has_contributor", "alice"))
    bob = invoke(service, "store", fact("api-server", "has-contributor", "bob"))
    assert bob["status"] == "stored" and bob["multi_valued"] is True
    assert bob["also_current"] == [alice["id"]]
    rows = semantic_rows(service)
    assert all(m.t_invalid is None and m.multi_valued for m in rows.values())
    results = invoke(
        service, "recall", {"query": "api-server contributor", "limit": 10, "explain": True}
    )["results"]
    assert {r["id"] for r in results} == {alice["id"], bob["id"]}
    assert all(r["explain"]["multi_valued"] and "contradiction" not in r for r in results)
    assert invoke(service, "reflect", {})["contradictions"] == []
    [entry] = audit(service, "multi_valued")
    assert entry["memory_id"] == bob["id"] and entry["detail"]["also_current"] == [alice["id"]]


def test_configured_multi_valued_covers_the_synonym_family(make_service: ServiceFactory) -> None:
    service = make_service(conflict={"multi_valued_predicates": ["uses"]})
    invoke(service, "store", fact("api-server", "uses", "tokio"))
    serde = invoke(service, "store", fact("api-server", "requires", "serde"))
    assert serde["status"] == "stored" and serde["multi_valued"] is True
    assert audit(service, "supersede") == []


def test_explicit_multi_valued_flag(clocked: tuple[MemoryService, Clock]) -> None:
    service, _ = clocked
    tokio = invoke(service, "store", fact("api-server", "uses", "tokio"))
    serde = invoke(service, "store", fact("api-server", "uses", "serde", multi_valued=True))
    assert serde["multi_valued"] is True and serde["also_current"] == [tokio["id"]]
    # Once tagged, the (subject, predicate) keeps collecting values.
    axum = invoke(service, "store", fact("api-server", "uses", "axum"))
    assert axum["status"] == "stored" and axum["multi_valued"] is True
    rows = semantic_rows(service)
    assert {m.object for m in rows.values() if m.t_invalid is None} == {"tokio", "serde", "axum"}
    assert all(m.multi_valued for m in rows.values())


# ------------------------------------------------------------------- service: contradictions


def test_lower_confidence_fact_is_a_flagged_contradiction(
    clocked: tuple[MemoryService, Clock],
) -> None:
    service, _ = clocked
    strong = invoke(service, "store", fact("api-server", "uses", "tokio 1.38", confidence=0.95))
    weak = invoke(service, "store", fact("api-server", "depends-on", "tokio 1.40", confidence=0.5))
    assert conforms("store", weak)["status"] == "contradiction"
    assert weak["contradicts"] == [strong["id"]]
    rows = semantic_rows(service)
    assert rows[strong["id"]].t_invalid is None and rows[weak["id"]].t_invalid is None
    recalled = invoke(service, "recall", {"query": "api-server tokio", "limit": 10})
    results = conforms("recall", recalled)["results"]
    flagged = {r["id"]: r for r in results}
    assert set(flagged) == {strong["id"], weak["id"]}
    assert flagged[strong["id"]]["contradiction"] is True
    assert flagged[strong["id"]]["contradicts"] == [weak["id"]]
    assert flagged[weak["id"]]["contradicts"] == [strong["id"]]
    [group] = conforms("reflect", invoke(service, "reflect", {}))["contradictions"]
    assert {f["id"] for f in group["facts"]} == {strong["id"], weak["id"]}
    [entry] = audit(service, "contradiction")
    assert entry["memory_id"] == weak["id"]
    assert entry["detail"] == {"contradicts": [strong["id"]]}


def test_a_stale_contradiction_partner_is_counted_as_held_back(
    clocked: tuple[MemoryService, Clock],
) -> None:
    """The flag names the stale side; it is not returned by default, and the response counts it
    (so the agent knows to ask with include_stale) whatever the limit."""
    service, clock = clocked
    strong = invoke(service, "store", fact("api-server", "uses", "tokio 1.38", confidence=0.95))
    clock.now += timedelta(days=200)  # never validated: stale at 180 days
    weak = invoke(service, "store", fact("api-server", "depends-on", "tokio 1.40", confidence=0.5))
    assert weak["status"] == "contradiction"
    for limit in (1, 5):
        query = "api-server depends on tokio 1.40"
        response = invoke(service, "recall", {"query": query, "limit": limit})
        assert [r["id"] for r in response["results"]] == [weak["id"]]
        assert response["results"][0]["contradicts"] == [strong["id"]]
        assert response.get("stale_held_back", 0) == 1, limit


def test_both_sides_of_a_contradiction_are_returned_even_past_the_limit(
    clocked: tuple[MemoryService, Clock],
) -> None:
    """Spec Layer 4: "both are returned with a contradiction: true flag"."""
    service, _ = clocked
    strong = invoke(service, "store", fact("api-server", "uses", "tokio 1.38", confidence=0.95))
    weak = invoke(service, "store", fact("api-server", "uses", "tokio 1.40", confidence=0.5))
    invoke(service, "store", {"content": "unrelated note about the office coffee machine"})
    answer = invoke(
        service,
        "recall",
        {"query": "api-server tokio", "limit": 1, "types": ["semantic"], "explain": True},
    )
    first, second = answer["results"]
    other = weak["id"] if first["id"] == strong["id"] else strong["id"]
    assert first["contradiction"] is True and first["contradicts"] == [other]
    assert second["id"] == other and second["included_as"] == "contradiction"
    assert second["contradiction"] is True and second["contradicts"] == [first["id"]]
    assert second["content"] == f"api-server uses {second['explain']['object']}"
    assert len(answer["results"]) == 2
    # Under a token budget the page stays as cut; the flag still names the other fact.
    budgeted = invoke(
        service,
        "recall",
        {"query": "api-server tokio", "limit": 1, "types": ["semantic"], "max_tokens": 500},
    )
    [only] = budgeted["results"]
    assert only["contradicts"] == [other]


def test_a_view_of_the_past_gets_no_contradiction_partners_from_today(
    clocked: tuple[MemoryService, Clock],
) -> None:
    service, _ = clocked
    strong = invoke(service, "store", fact("api-server", "uses", "tokio 1.38", t_valid=iso(JAN)))
    weak = invoke(
        service, "store", fact("api-server", "uses", "tokio 1.40", t_valid=iso(APR), confidence=0.5)
    )
    assert weak["status"] == "contradiction"
    past = {"query": "api-server tokio", "types": ["semantic"], "limit": 1}
    for view in ({"as_of": iso(FEB)}, {"time_range": {"after": iso(JAN), "before": iso(FEB)}}):
        results = invoke(service, "recall", {**past, **view})["results"]
        assert [r["id"] for r in results] == [strong["id"]], view
    # In February the April value did not exist yet: nothing contradicted the fact then.
    [then] = invoke(service, "recall", {**past, "as_of": iso(FEB)})["results"]
    assert "contradiction" not in then
    [now] = invoke(service, "recall", {**past, "as_of": iso(T0)})["results"][:1]
    assert now["contradiction"] is True


def test_resolving_a_contradiction_with_supersedes_clears_the_flag(
    clocked: tuple[MemoryService, Clock],
) -> None:
    service, _ = clocked
    strong = invoke(service, "store", fact("api-server", "uses", "tokio 1.38", confidence=0.95))
    weak = invoke(service, "store", fact("api-server", "uses", "tokio 1.40", confidence=0.5))
    fixed = invoke(
        service,
        "store",
        fact("api-server", "uses", "tokio 1.40", confidence=1.0, supersedes=strong["id"]),
    )
    assert fixed["superseded"] == [strong["id"]]
    invoke(service, "forget", {"ids": [weak["id"]]})
    results = invoke(service, "recall", {"query": "api-server tokio"})["results"]
    assert [r["id"] for r in results] == [fixed["id"]] and "contradiction" not in results[0]


def test_contradictions_never_cross_namespaces(clocked: tuple[MemoryService, Clock]) -> None:
    service, _ = clocked
    a = invoke(service, "store", fact("api-server", "uses", "tokio 1.36", namespace="team-a"))
    b = invoke(
        service,
        "store",
        fact("api-server", "uses", "tokio 1.38", namespace="team-b", confidence=0.4),
    )
    assert b["status"] == "stored"
    assert service.meta.get_memory(a["id"]).t_invalid is None
    for namespace, own in (("team-a", a["id"]), ("team-b", b["id"])):
        results = invoke(service, "recall", {"query": "api-server tokio", "namespace": namespace})[
            "results"
        ]
        assert [r["id"] for r in results] == [own]
        assert "contradiction" not in results[0]
        assert invoke(service, "reflect", {"namespace": namespace})["contradictions"] == []
    assert audit(service, "supersede", "team-a") == audit(service, "supersede", "team-b") == []


# --------------------------------------------------------------------------- service: subject


def test_subject_listed_among_entities_is_still_the_subject(
    clocked: tuple[MemoryService, Clock],
) -> None:
    service, _ = clocked
    old = invoke(
        service, "store", fact("api-server", "uses", "tokio 1.36", entities=["tokio", "api-server"])
    )
    new = invoke(service, "store", fact("api-server", "uses", "tokio 1.38", entities=["tokio"]))
    assert new["status"] == "superseded" and new["superseded"] == [old["id"]]
    rows = semantic_rows(service)
    assert rows[old["id"]].subject_entity_id == rows[new["id"]].subject_entity_id


def test_bulk_ingestion_resolves_conflicts_in_order(clocked: tuple[MemoryService, Clock]) -> None:
    service, _ = clocked
    old, new = store_many(
        service,
        [
            fact("api-server", "uses", "tokio 1.36", t_valid=iso(JAN)),
            fact("api-server", "depends-on", "tokio 1.38", t_valid=iso(APR)),
        ],
    )
    assert new["status"] == "superseded" and new["superseded"] == [old["id"]]
    assert recall_ids(service, query="api-server tokio") == {new["id"]}
    assert recall_ids(service, query="api-server tokio", as_of=iso(MAR)) == {old["id"]}


def test_entities_named_with_a_duplicate_fact_join_the_kept_fact(
    clocked: tuple[MemoryService, Clock],
) -> None:
    service, _ = clocked
    kept = invoke(service, "store", fact("api-server", "uses", "tokio", entities=["tokio"]))
    again = invoke(
        service, "store", fact("api-server", "uses", "tokio", entities=["async runtime"])
    )
    assert again["status"] == "duplicate"
    # The kept fact's index payload was refreshed: it must still be a current fact.
    assert [r["id"] for r in invoke(service, "recall", {"query": "api-server"})["results"]] == [
        kept["id"]
    ]
    found = invoke(
        service,
        "recall",
        {"query": "api-server", "entities": ["async runtime"], "explain": True},
    )["results"]
    assert [r["id"] for r in found] == [kept["id"]]
    assert sorted(found[0]["explain"]["entities"]) == ["api-server", "async runtime", "tokio"]
    entity_ids = [e["id"] for e in service.meta.entities_of_namespace("default")]
    assert len(entity_ids) == 3 and service.meta.orphan_entities(entity_ids) == []
