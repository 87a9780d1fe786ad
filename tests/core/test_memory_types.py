"""Memory type auto-detection (spec store step 1, "Memory type auto-detection" unit tests).

Proves ``detect_type`` (subject+predicate+object -> semantic; steps or conditions -> procedural;
everything else -> episodic; an explicit type overrides) and, through a real MemoryService, that
the detected type is what gets stored and recalled, that each type's required fields are enforced
with a clear error (and nothing written), and what text each type embeds.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from ferrex.core.errors import FerrexError
from ferrex.core.memory import Memory, MemoryType, detect_type, embed_text, semantic_embed_text
from ferrex.core.service import MemoryService
from ferrex.server.calls import run_tool as invoke

NOW = datetime(2026, 4, 1, tzinfo=UTC)


def detect(explicit: str | None = None, **fields: Any) -> MemoryType:
    triple = [fields.get(k) for k in ("subject", "predicate", "object")]
    return detect_type(
        explicit,
        has_triple_field=any(v is not None for v in triple),
        has_full_triple=all(v is not None for v in triple),
        has_procedure_fields=bool(fields.get("steps") or fields.get("conditions")),
    )


# --------------------------------------------------------------------------- detect_type


def test_full_triple_is_semantic() -> None:
    assert detect(subject="api", predicate="uses", object="tokio") is MemoryType.SEMANTIC
    assert detect(subject="a", predicate="b", object="c", content="x") is MemoryType.SEMANTIC


@pytest.mark.parametrize("fields", [{"steps": ["build"]}, {"conditions": ["on main"]}])
def test_steps_or_conditions_are_procedural(fields: dict[str, Any]) -> None:
    assert detect(**fields) is MemoryType.PROCEDURAL


@pytest.mark.parametrize(
    "fields",
    [
        {"content": "debugged a deadlock"},
        {"content": "x", "subject": "api", "predicate": "uses"},  # partial triple
        {"content": "x", "steps": []},
    ],
)
def test_everything_else_is_episodic(fields: dict[str, Any]) -> None:
    assert detect(**fields) is MemoryType.EPISODIC


@pytest.mark.parametrize("explicit", ["episodic", "semantic", "procedural"])
def test_explicit_type_overrides_detection(explicit: str) -> None:
    fields = {"subject": "a", "predicate": "b", "object": "c", "steps": ["s"], "content": "x"}
    assert detect(explicit, **fields) is MemoryType(explicit)


def test_embed_text_by_type() -> None:
    assert semantic_embed_text("api-server", "depends_on", "tokio 1.38") == (
        "api-server depends on tokio 1.38"
    )
    episodic = Memory(
        id="mem_a",
        namespace="default",
        type=MemoryType.EPISODIC,
        created_at=NOW,
        updated_at=NOW,
        event_time=NOW,
        content="fixed the pool",
    )
    assert embed_text(episodic) == "fixed the pool"


# --------------------------------------------------------------------------- service


def test_stored_types_follow_detection(service: MemoryService) -> None:
    semantic = invoke(
        service, "store", {"subject": "api-server", "predicate": "uses", "object": "tokio"}
    )
    procedural = invoke(
        service, "store", {"name": "deploy", "steps": ["build release", "push image"]}
    )
    episodic = invoke(
        service, "store", {"content": "paired with dana on the flaky integration test"}
    )
    stored = service.meta.get_memories([semantic["id"], procedural["id"], episodic["id"]])
    assert [semantic["type"], procedural["type"], episodic["type"]] == [
        "semantic",
        "procedural",
        "episodic",
    ]
    assert {m.type.value for m in stored.values()} == {"semantic", "procedural", "episodic"}
    assert (
        stored[procedural["id"]].content
        == "Procedure: deploy\nSteps:\n1. build release\n2. push image"
    )


def test_explicit_type_overrides_on_store(service: MemoryService) -> None:
    note = invoke(
        service,
        "store",
        {"type": "episodic", "content": "talked about tokio", "subject": "api", "predicate": "x"},
    )
    recipe = invoke(service, "store", {"type": "procedural", "content": "1. stop\n2. start"})
    assert (note["type"], recipe["type"]) == ("episodic", "procedural")
    recalled = invoke(service, "recall", {"query": "stop start", "types": ["procedural"]})[
        "results"
    ]
    assert [r["id"] for r in recalled] == [recipe["id"]]


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"type": "semantic", "subject": "api", "predicate": "uses"}, "object"),
        ({"subject": "api", "predicate": "uses"}, "object"),  # a fact missing its object
        ({"type": "procedural", "name": "deploy"}, "content"),
        ({"type": "episodic"}, "content"),
    ],
)
def test_missing_required_fields_are_clear_errors(
    service: MemoryService, arguments: dict[str, Any], field: str
) -> None:
    with pytest.raises(FerrexError) as error:
        invoke(service, "store", arguments)
    assert error.value.code == "missing_field" and error.value.details["field"] == field
    assert service.meta.count_memories() == 0
    assert service.index.points_by_memory() == {}


def test_citing_a_memory_that_does_not_exist_stores_and_says_nothing_was_validated(
    service: MemoryService,
) -> None:
    stored = invoke(
        service,
        "store",
        {"content": "summary of the incident review", "source": "memory:mem_00000000dead"},
    )
    assert stored["status"] == "stored" and "validated" not in stored
    [warning] = stored["warnings"]
    assert "mem_00000000dead" in warning and "nothing was validated" in warning


# --------------------------------------------------------------------------- the spec's examples


SPEC_SEMANTIC = {
    "type": "semantic",
    "subject": "api-server",
    "predicate": "uses",
    "object": "tokio 1.38",
    "confidence": 0.95,
    "source": "episodic:abc123",
    "t_valid": "2026-04-01T00:00:00Z",
    "t_invalid": None,
}
SPEC_PROCEDURAL = {
    "type": "procedural",
    "name": "deploy-to-staging",
    "conditions": ["branch is main", "tests pass"],
    "steps": ["build release", "push to registry", "apply k8s manifest"],
    "version": 3,
}


def test_the_spec_examples_store_verbatim(service: MemoryService) -> None:
    """The design's JSON examples (with ``t_invalid: null`` and ``version: 3``) are accepted as
    written; the version ferrex assigns is said, not silently replaced."""
    fact = invoke(service, "store", dict(SPEC_SEMANTIC))
    assert fact["status"] == "stored"
    procedure = invoke(service, "store", dict(SPEC_PROCEDURAL))
    assert procedure["version"] == 1
    [warning] = procedure["warnings"]
    assert "version 1" in warning and "version 3 was asked for" in warning


def test_a_fact_given_with_t_invalid_is_history_and_changes_no_current_fact(
    service: MemoryService,
) -> None:
    current = invoke(
        service, "store", {"subject": "api", "predicate": "uses", "object": "tokio 1.38"}
    )
    old = invoke(
        service,
        "store",
        {
            "subject": "api",
            "predicate": "uses",
            "object": "async-std",
            "t_valid": "2024-01-01",
            "t_invalid": "2025-01-01",
        },
    )
    assert old["status"] == "historical"
    assert service.meta.get_memory(current["id"]).t_invalid is None
    now_ids = [
        r["id"] for r in invoke(service, "recall", {"query": "api uses", "limit": 10})["results"]
    ]
    assert now_ids == [current["id"]]
    then = invoke(service, "recall", {"query": "api uses", "as_of": "2024-06-01", "limit": 10})[
        "results"
    ]
    assert [r["id"] for r in then] == [old["id"]]


def test_a_past_value_stored_again_is_a_duplicate_not_a_second_history_row(
    service: MemoryService,
) -> None:
    old = {"subject": "atlas", "predicate": "database", "object": "PostgreSQL 14"}
    first = invoke(service, "store", {**old, "t_valid": "2024-01-10T00:00:00Z"})
    invoke(service, "store", {**old, "object": "PostgreSQL 16", "t_valid": "2025-01-10T00:00:00Z"})
    again = invoke(service, "store", {**old, "t_valid": "2024-01-10T00:00:00Z"})
    assert again["status"] == "duplicate" and again["id"] == first["id"]
    then = invoke(
        service, "recall", {"query": "atlas database", "as_of": "2024-06-01", "limit": 10}
    )
    assert [r["id"] for r in then["results"]] == [first["id"]]


def test_a_current_fact_given_again_with_t_invalid_ends(service: MemoryService) -> None:
    """How a fact ends without a replacement value: the same fact with a t_invalid."""
    role = {"subject": "Bob Martin", "predicate": "role", "object": "tech lead"}
    current = invoke(service, "store", {**role, "t_valid": "2023-03-01T00:00:00Z"})
    ended = invoke(
        service,
        "store",
        {**role, "t_valid": "2023-03-01T00:00:00Z", "t_invalid": "2024-08-30T00:00:00Z"},
    )
    assert ended["status"] == "ended" and ended["id"] == current["id"]
    assert service.meta.count_memories() == 1
    query = {"query": "Bob Martin role", "limit": 5}
    assert invoke(service, "recall", query)["results"] == []
    then = invoke(service, "recall", {**query, "as_of": "2024-01-01"})["results"]
    assert [r["id"] for r in then] == [current["id"]]
    past = invoke(service, "recall", {**query, "include_invalidated": True})["results"]
    assert past[0]["freshness"]["staleness"] == "superseded"
    assert past[0]["t_invalid"].startswith("2024-08-30")
    [entry] = [e for e in service.meta.audit_entries(limit=100) if e["action"] == "ended"]
    assert entry["memory_id"] == current["id"]


def test_a_fact_ends_without_repeating_its_t_valid(service: MemoryService) -> None:
    """The same triple with only t_invalid ends the current fact, using its stored t_valid."""
    role = {"subject": "Bob Martin", "predicate": "role", "object": "tech lead"}
    current = invoke(service, "store", {**role, "t_valid": "2023-03-01T00:00:00Z"})
    ended = invoke(service, "store", {**role, "t_invalid": "2024-08-30T00:00:00Z"})
    assert ended["status"] == "ended" and ended["id"] == current["id"]
    stored = service.meta.get_memory(current["id"])
    assert stored is not None and stored.t_valid == datetime(2023, 3, 1, tzinfo=UTC)
    assert stored.t_invalid == datetime(2024, 8, 30, tzinfo=UTC)
    assert service.meta.count_memories() == 1
    # Ending it again is known history, not a second row.
    again = invoke(service, "store", {**role, "t_invalid": "2024-08-30T00:00:00Z"})
    assert again["status"] == "duplicate" and again["id"] == current["id"]
    assert service.meta.count_memories() == 1


def test_t_invalid_without_t_valid_and_no_such_fact_is_refused(service: MemoryService) -> None:
    invoke(service, "store", {"subject": "Bob Martin", "predicate": "role", "object": "tech lead"})
    with pytest.raises(FerrexError) as error:
        invoke(
            service,
            "store",
            {
                "subject": "Bob Martin",
                "predicate": "role",
                "object": "architect",
                "t_invalid": "2020-01-01T00:00:00Z",
            },
        )
    assert error.value.code == "invalid_params" and error.value.details["field"] == "t_invalid"
    assert "give t_valid" in error.value.message
    assert service.meta.count_memories() == 1


def test_history_already_known_is_a_duplicate(service: MemoryService) -> None:
    history = {
        "subject": "api",
        "predicate": "uses",
        "object": "tokio 1.30",
        "t_valid": "2025-01-01T00:00:00Z",
        "t_invalid": "2025-09-01T00:00:00Z",
    }
    first = invoke(service, "store", dict(history))
    again = invoke(service, "store", dict(history))
    assert first["status"] == "historical"
    assert again["status"] == "duplicate" and again["id"] == first["id"]
    overlapping = invoke(
        service, "store", {**history, "t_valid": "2025-06-01T00:00:00Z", "t_invalid": None}
    )
    assert overlapping["status"] != "historical" or overlapping["id"] != first["id"]
    then = invoke(
        service, "recall", {"query": "api uses tokio", "as_of": "2025-03-01", "limit": 10}
    )
    assert [r["id"] for r in then["results"]] == [first["id"]]


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"subject": "a", "predicate": "b", "object": "c", "t_invalid": "2020-01-01"}, "t_invalid"),
        (
            {
                "subject": "a",
                "predicate": "b",
                "object": "c",
                "t_valid": "2020-01-01",
                "t_invalid": "2999-01-01",  # still true now: a current fact, not history
            },
            "t_invalid",
        ),
        (
            {
                "subject": "a",
                "predicate": "b",
                "object": "c",
                "t_valid": "2021-01-01",
                "t_invalid": "2020-01-01",
            },
            "t_invalid",
        ),
    ],
)
def test_t_invalid_must_end_after_the_fact_began(
    service: MemoryService, arguments: dict[str, Any], field: str
) -> None:
    with pytest.raises(FerrexError) as error:
        invoke(service, "store", arguments)
    assert error.value.code == "invalid_params" and error.value.details["field"] == field
    assert service.meta.count_memories() == 0


@pytest.mark.parametrize(
    ("arguments", "dropped"),
    [
        ({"content": "talked about the api", "predicate": "uses", "object": "redis"}, "predicate"),
        ({"type": "episodic", "content": "planned the release", "steps": ["a", "b"]}, "steps"),
        ({"content": "named the service", "name": "x"}, "name"),
        ({"subject": "api", "predicate": "uses", "object": "redis", "content": "x"}, "content"),
        ({"type": "procedural", "content": "1. a\n2. b", "subject": "api"}, "subject"),
    ],
)
def test_fields_the_type_has_no_place_for_are_named_in_a_warning(
    service: MemoryService, arguments: dict[str, Any], dropped: str
) -> None:
    """The store happens (the type rules are the design's), but nothing is dropped silently."""
    stored = invoke(service, "store", arguments)
    assert stored["status"] == "stored"
    [warning] = stored["warnings"]
    assert "so not stored" in warning and dropped in warning


def test_a_memory_using_every_field_it_gave_has_no_warning(service: MemoryService) -> None:
    for arguments in (
        {"content": "fixed the pool", "timestamp": "2026-03-01", "entities": ["pool"]},
        {"subject": "api", "predicate": "uses", "object": "redis", "t_valid": "2026-01-01"},
        {"name": "deploy", "steps": ["build", "ship"], "conditions": ["on main"]},
    ):
        assert "warnings" not in invoke(service, "store", arguments)
