"""Procedural memory versions (spec "Procedural Memory", store step 8).

Proves on the pure helpers (render, next/current/find version, name and definition comparison) and
on a real MemoryService: storing a procedure whose name exists creates version N+1 and keeps the
old one (closed, linked, audited); recall returns the newest version by default, ``version`` gets
an old one and ``include_invalidated`` all of them; ``rollback_to`` creates N+1 equal to version k;
a changed version is an update (never rejected as a near-duplicate of its own past), an unchanged
one is a duplicate; names compare case-insensitively; versions are per namespace; rejected
version requests write nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from ferrex.core.errors import FerrexError
from ferrex.core.ingest.procedures import (
    current_version,
    find_version,
    next_version,
    normalize_name,
    render_content,
    same_definition,
    same_procedure_name,
)
from ferrex.core.memory import Memory, MemoryType
from ferrex.core.service import MemoryService
from ferrex.server.calls import run_tool as invoke

NOW = datetime(2026, 4, 1, tzinfo=UTC)
V1 = ["build release", "push to registry", "apply k8s manifest"]
V2 = ["build release", "run the integration tests", "push to registry", "apply k8s manifest"]
CONDITIONS = ["branch is main", "tests pass"]


def version(number: int, *, current: bool = False, steps: list[str] | None = None) -> Memory:
    return Memory(
        id=f"mem_v{number}",
        namespace="default",
        type=MemoryType.PROCEDURAL,
        created_at=NOW,
        updated_at=NOW,
        event_time=NOW,
        name="deploy-to-staging",
        steps=steps or [],
        content=render_content("deploy-to-staging", [], steps or []),
        version=number,
        t_invalid=None if current else NOW,
    )


def deploy(steps: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "type": "procedural",
        "name": "deploy-to-staging",
        "conditions": CONDITIONS,
        "steps": steps,
        **extra,
    }


def recall_procedures(service: MemoryService, **extra: Any) -> list[dict[str, Any]]:
    arguments = {
        "query": "how to deploy to staging",
        "types": ["procedural"],
        "limit": 10,
        "explain": True,  # the steps and conditions, beside the content
    }
    return invoke(service, "recall", {**arguments, **extra})["results"]


# --------------------------------------------------------------------------- helpers


def test_render_content_is_self_contained() -> None:
    assert render_content("deploy-to-staging", CONDITIONS, V1) == (
        "Procedure: deploy-to-staging\nWhen: branch is main; tests pass\nSteps:\n"
        "1. build release\n2. push to registry\n3. apply k8s manifest"
    )


def test_version_arithmetic() -> None:
    versions = [version(1), version(2), version(3, current=True)]
    assert next_version(versions) == 4 and next_version([]) == 1
    assert current_version(versions) is versions[2]
    assert current_version([version(1)]) is None
    assert find_version(versions, 2) is versions[1] and find_version(versions, 9) is None


def test_names_compare_case_and_spacing_insensitively() -> None:
    assert normalize_name("  Deploy   To Staging ") == "deploy to staging"
    assert same_procedure_name("Deploy-To-Staging", "deploy-to-staging")
    assert not same_procedure_name(
        "deploy-to-staging", "deploy-to-prod"
    ) and not same_procedure_name(None, "x")


def test_same_definition_ignores_spacing_only() -> None:
    a = version(1, steps=V1)
    spaced = version(2, steps=[f" {s}  " for s in V1])
    spaced.content = a.content.replace(" ", "  ")
    assert same_definition(a, spaced)
    assert not same_definition(a, version(2, steps=V2))


# --------------------------------------------------------------------------- service


def test_same_name_creates_the_next_version_and_keeps_the_old(service: MemoryService) -> None:
    first = invoke(service, "store", deploy(V1))
    second = invoke(service, "store", deploy(V2))
    assert (first["version"], second["version"]) == (1, 2)
    assert second["status"] == "stored"
    assert second["previous_version"] == {"id": first["id"], "version": 1}
    old = service.meta.get_memory(first["id"])
    assert old is not None and old.steps == V1
    assert old.t_invalid is not None and old.superseded_by == second["id"]
    [entry] = service.meta.audit_entries("default", "version")
    assert (entry["memory_id"], entry["other_id"]) == (second["id"], first["id"])
    [supersede] = service.meta.audit_entries("default", "supersede")
    assert supersede["memory_id"] == first["id"]
    assert supersede["detail"] == {"reason": "new version 2"}


def test_recall_returns_newest_by_default_and_old_on_request(service: MemoryService) -> None:
    first = invoke(service, "store", deploy(V1))
    second = invoke(service, "store", deploy(V2))
    newest = recall_procedures(service)
    assert [(r["id"], r["version"], r["explain"]["steps"]) for r in newest] == [
        (second["id"], 2, V2)
    ]
    old = recall_procedures(service, version=1)
    assert [(r["id"], r["explain"]["steps"]) for r in old] == [(first["id"], V1)]
    assert old[0]["freshness"]["staleness"] == "superseded"
    every = recall_procedures(service, include_invalidated=True)
    assert {r["version"] for r in every} == {1, 2}


def test_rollback_creates_a_new_version_equal_to_the_old(service: MemoryService) -> None:
    invoke(service, "store", deploy(V1))
    second = invoke(service, "store", deploy(V2))
    rolled = invoke(
        service, "store", {"type": "procedural", "name": "deploy-to-staging", "rollback_to": 1}
    )
    assert (rolled["version"], rolled["rolled_back_to"]) == (3, 1)
    assert rolled["previous_version"] == {"id": second["id"], "version": 2}
    [current] = recall_procedures(service)
    assert (current["id"], current["version"], current["explain"]["steps"]) == (rolled["id"], 3, V1)
    assert current["explain"]["conditions"] == CONDITIONS
    assert [r["version"] for r in recall_procedures(service, version=2)] == [2]


def test_a_changed_version_is_not_a_near_duplicate(service: MemoryService) -> None:
    invoke(service, "store", deploy(V1))
    # V2 embeds with cosine > 0.95 to V1: still an update, not a rejected duplicate.
    assert invoke(service, "store", deploy(V2))["version"] == 2


def test_an_unchanged_version_is_a_duplicate(service: MemoryService) -> None:
    first = invoke(service, "store", deploy(V1))
    with pytest.raises(FerrexError) as error:
        invoke(service, "store", deploy(V1))
    assert error.value.code == "duplicate" and error.value.details["existing_id"] == first["id"]
    assert service.meta.count_memories() == 1


def test_names_match_case_insensitively(service: MemoryService) -> None:
    first = invoke(service, "store", deploy(V1))
    second = invoke(service, "store", {**deploy(V2), "name": "Deploy-To-Staging"})
    assert second["version"] == 2 and second["previous_version"]["id"] == first["id"]


def test_other_names_and_namespaces_have_their_own_versions(service: MemoryService) -> None:
    invoke(service, "store", deploy(V1))
    prod = invoke(
        service, "store", {**deploy(["wait for approval", "apply prod manifest"]), "name": "prod"}
    )
    elsewhere = invoke(service, "store", {**deploy(V1), "namespace": "other"})
    assert prod["version"] == 1 and elsewhere["version"] == 1
    assert "previous_version" not in prod and "previous_version" not in elsewhere


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"type": "procedural", "name": "deploy-to-staging", "rollback_to": 7}, "not_found"),
        ({"type": "procedural", "rollback_to": 1, "content": "x"}, "missing_field"),
        ({"type": "episodic", "content": "an event", "rollback_to": 1}, "invalid_params"),
    ],
)
def test_bad_version_requests_write_nothing(
    service: MemoryService, arguments: dict[str, Any], code: str
) -> None:
    first = invoke(service, "store", deploy(V1))
    count = service.meta.count_memories()
    points = service.index.points_by_memory()
    with pytest.raises(FerrexError) as error:
        invoke(service, "store", arguments)
    assert error.value.code == code
    assert service.meta.count_memories() == count
    assert service.index.points_by_memory() == points
    assert service.meta.get_memory(first["id"]).t_invalid is None


def test_a_re_store_in_other_words_is_still_a_duplicate(service: MemoryService) -> None:
    """Another case of the name, other spacing, the steps as numbered text instead of a list:
    same procedure, same steps, so no new version (the case of a step counts: commands)."""
    first = invoke(service, "store", deploy(["build release", "push image"]))
    for again in (
        deploy(["build release", "push  image"], name="DEPLOY-to-Staging"),
        {
            "type": "procedural",
            "name": "deploy-to-staging",
            "conditions": CONDITIONS,
            "content": "1. build release\n2. push image",
        },
    ):
        with pytest.raises(FerrexError) as error:
            invoke(service, "store", again)
        assert error.value.code == "duplicate"
        assert error.value.details["existing_id"] == first["id"]
    assert len(recall_procedures(service, include_invalidated=True)) == 1


def test_rolling_back_to_the_current_steps_is_refused(service: MemoryService) -> None:
    invoke(service, "store", deploy(["build", "ship"]))
    invoke(service, "store", deploy(["build", "test", "ship"]))
    invoke(service, "store", deploy(["build", "ship"]))  # version 3 has version 1's steps
    with pytest.raises(FerrexError) as error:
        invoke(
            service, "store", {"type": "procedural", "name": "deploy-to-staging", "rollback_to": 1}
        )
    assert error.value.code == "duplicate"
    assert len(recall_procedures(service, include_invalidated=True)) == 3


@pytest.mark.parametrize("extra", [{"steps": ["x"]}, {"content": "1. x"}, {"conditions": ["y"]}])
def test_rollback_with_new_steps_is_refused(service: MemoryService, extra: dict[str, Any]) -> None:
    invoke(service, "store", deploy(["build", "ship"]))
    invoke(service, "store", deploy(["build", "test", "ship"]))
    with pytest.raises(FerrexError) as error:
        invoke(
            service,
            "store",
            {"type": "procedural", "name": "deploy-to-staging", "rollback_to": 1, **extra},
        )
    assert error.value.code == "invalid_params"
    assert error.value.details["field"] == next(iter(extra))
    assert len(recall_procedures(service, include_invalidated=True)) == 2


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (
            {"content": "When: on weekdays only\n1. build the artifacts\n2. ship to prod"},
            {"content": "When: never on fridays\n1. build the artifacts\n2. ship to prod"},
        ),
        (
            {"steps": ["export PATH=/opt/bin:$PATH", "run ./configure"]},
            {"steps": ["export path=/opt/bin:$path", "run ./configure"]},
        ),
        (
            {"steps": ["1.5 GB heap for the JVM via -Xmx", "start the service"]},
            {"steps": ["2.5 GB heap for the JVM via -Xmx", "start the service"]},
        ),
        (
            {"content": "Release checklist, needs finance approval\n- build\n- ship"},
            {"content": "Release checklist, no approval needed anymore\n- build\n- ship"},
        ),
    ],
)
def test_a_real_change_is_a_new_version_however_small(
    service: MemoryService, first: dict[str, Any], second: dict[str, Any]
) -> None:
    """Conditions, the case of a command, a number that looks like a list marker, a preamble
    line: each is a change, so a new version (only spelling-neutral differences are not)."""
    invoke(service, "store", {"type": "procedural", "name": "release", **first})
    again = invoke(service, "store", {"type": "procedural", "name": "release", **second})
    assert again["version"] == 2, again


def test_version_on_an_unnamed_procedure_is_named_in_a_warning(service: MemoryService) -> None:
    stored = invoke(
        service,
        "store",
        {"type": "procedural", "steps": ["a thing to do", "another thing"], "version": 3},
    )
    assert stored["status"] == "stored" and "version" not in stored
    [warning] = stored["warnings"]
    assert "version not stored" in warning


def test_rollback_needs_no_explicit_type(service: MemoryService) -> None:
    """``name`` + ``rollback_to`` is a procedure, as the schema describes it."""
    invoke(service, "store", deploy(["build", "ship"]))
    invoke(service, "store", deploy(["build", "test", "ship"]))
    rolled = invoke(service, "store", {"name": "deploy-to-staging", "rollback_to": 1})
    assert rolled["type"] == "procedural" and rolled["version"] == 3
