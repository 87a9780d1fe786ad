"""The memory browser's reads (issue 40), through the engine's dispatch as the UI reaches
them over the link: browse without a query, a fact's history, a procedure's versions,
contradiction partners, growth per month; bad input refused with the tools' codes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from tests.support.harness import ServiceFactory

from ferrex.core.errors import FerrexError
from ferrex.core.service import MemoryService
from ferrex.runtime.operations import dispatch


def run(service: MemoryService, op: str, **arguments: Any) -> Any:
    return dispatch(service, op, arguments)


@pytest.fixture
def filled(make_service: ServiceFactory) -> tuple[MemoryService, dict[str, str]]:
    service = make_service()
    ids: dict[str, str] = {}

    def store(key: str, **arguments: Any) -> dict[str, Any]:
        answer: dict[str, Any] = run(service, "store", **arguments)
        ids[key] = answer["id"]
        return answer

    store("event", content="the release train left on time", timestamp="2025-03-04T10:00:00Z")
    store("old", subject="api", predicate="uses", object="postgres 14", t_valid="2024-01-01")
    store("new", subject="api", predicate="uses", object="postgres 16")
    store("v1", type="procedural", name="deploy", steps=["build", "push"])
    store("v2", type="procedural", name="deploy", steps=["build", "test", "push"])
    store("other", content="standup moved to ten", namespace="team")
    return service, ids


def test_browse_pages_filters_and_sorts_without_a_query(
    filled: tuple[MemoryService, dict[str, str]],
) -> None:
    service, ids = filled
    page = run(service, "browse")
    listed = [m["id"] for m in page["memories"]]
    # Current memories only, by their own time (the event of 2025 last), the other namespace
    # not at all.
    assert set(listed) == {ids["event"], ids["new"], ids["v2"]} and page["total"] == 3
    assert listed[-1] == ids["event"] and page["namespace"] == "default"
    every = run(service, "browse", include_invalidated=True, page_size=2, page=2)
    assert every["total"] == 5 and len(every["memories"]) == 2
    facts = run(service, "browse", types=["semantic"], include_invalidated=True, sort="type")
    assert {m["id"] for m in facts["memories"]} == {ids["old"], ids["new"]}
    superseded = run(service, "browse", staleness="superseded")
    assert {m["id"] for m in superseded["memories"]} == {ids["old"], ids["v1"]}
    team = run(service, "browse", namespace="team")
    assert [m["id"] for m in team["memories"]] == [ids["other"]]
    assert team["memories"][0]["content"] == "standup moved to ten"


def test_a_facts_history_and_a_procedures_versions(
    filled: tuple[MemoryService, dict[str, str]],
) -> None:
    service, ids = filled
    history = run(service, "history", id=ids["new"])
    assert history["kind"] == "fact" and history["contradicts"] == []
    values = history["versions"]
    assert [v["id"] for v in values] == [ids["old"], ids["new"]]
    assert values[0]["t_invalid"] is not None and values[0]["superseded_by"] == ids["new"]
    assert values[0]["t_valid"].startswith("2024-01-01") and "t_invalid" not in values[1]
    versions = run(service, "history", id=ids["v1"])
    assert versions["kind"] == "procedure"
    assert [(v["id"], v["version"]) for v in versions["versions"]] == [
        (ids["v1"], 1),
        (ids["v2"], 2),
    ]
    assert versions["versions"][1]["steps"] == ["build", "test", "push"]
    event = run(service, "history", id=ids["event"])
    assert event["kind"] == "single" and event["memory"]["timestamp"].startswith("2025-03-04")


def test_contradiction_partners_and_growth(make_service: ServiceFactory) -> None:
    service = make_service()
    first = run(service, "store", subject="svc", predicate="port", object="80", confidence=0.9)
    second = run(service, "store", subject="svc", predicate="port", object="81", confidence=0.5)
    assert second["status"] == "contradiction"
    assert run(service, "history", id=first["id"])["contradicts"] == [second["id"]]
    activity = run(service, "activity")
    month = datetime.now(UTC).strftime("%Y-%m")
    assert activity["months"] == [month] and activity["by_type"]["semantic"] == [2]
    assert run(service, "activity", namespace="empty") == {
        "namespace": "empty",
        "months": [],
        "by_type": {"episodic": [], "semantic": [], "procedural": []},
    }


@pytest.mark.parametrize(
    ("op", "arguments", "code"),
    [
        ("browse", {"page": 0}, "invalid_params"),
        ("browse", {"page_size": 1000}, "invalid_params"),
        ("browse", {"sort": "size"}, "unknown_type"),
        ("browse", {"types": ["gossip"]}, "unknown_type"),
        ("browse", {"namespace": "no spaces"}, "invalid_namespace"),
        ("history", {"id": "mem_00000000000000000000dead"}, "not_found"),
        ("history", {"id": "../etc"}, "invalid_params"),
        ("history", {}, "missing_field"),
    ],
)
def test_bad_reads_are_refused_with_the_tools_codes(
    service: MemoryService, op: str, arguments: dict[str, Any], code: str
) -> None:
    with pytest.raises(FerrexError) as refused:
        run(service, op, **arguments)
    assert refused.value.code == code, refused.value.to_dict()
