"""Recall reads only the candidates that can reach the page, and returns what reading them all
would return.

Without a cross-encoder, candidates arrive by relevance and a recency boost multiplies a score
by at most 1.3: a candidate under the relevance floor, or under the ``limit``-th candidate's
relevance / 1.3, cannot enter the page, so its row is never read. The check: a short page is
exactly the head of a long page of the same query (which reads nearly every candidate), on a
store whose episodes, facts and procedures have every age, so boosts reorder the candidates.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.support.clock import MovableClock
from tests.support.harness import ServiceFactory

from ferrex.server.calls import run_tool

START = datetime(2026, 1, 1, tzinfo=UTC)
TEAMS = ("billing", "search", "payments", "mobile", "data", "infra")
ACTIONS = ("deployed", "rolled back", "load-tested", "patched", "audited", "migrated")


def fill(service: Any, clock: MovableClock) -> None:
    for n in range(60):
        team, action = TEAMS[n % len(TEAMS)], ACTIONS[(n // len(TEAMS)) % len(ACTIONS)]
        if n % 3 == 0:
            item: dict[str, Any] = {"content": f"the {team} team {action} release {n} on day {n}"}
        elif n % 3 == 1:
            item = {"subject": f"{team} service {n}", "predicate": "owned_by", "object": action}
        else:
            item = {
                "type": "procedural",
                "name": f"{team}-{n}",
                "steps": [f"{action} the {team} service", f"check dashboard {n}"],
            }
        assert run_tool(service, "store", item)["status"] == "stored"
        clock.advance(3.5)  # ages from 0 to ~200 days at recall time


@pytest.mark.parametrize("floor", [0.0, 0.1])
def test_a_short_page_is_the_head_of_a_long_one(make_service: ServiceFactory, floor: float) -> None:
    clock = MovableClock(START)
    # One candidate list for every limit (prefetch is max(prefetch_limit, 2 x limit)), so the
    # short and the long page differ only in how far the rows are read.
    service = make_service(
        clock=clock, **{"retrieval.min_score": floor, "retrieval.prefetch_limit": 120}
    )
    fill(service, clock)
    clock.advance(1)
    reads: list[int] = []
    read = service.meta.get_memories

    def counted(ids: Any) -> Any:
        reads.append(len(ids))
        return read(ids)

    service.meta.get_memories = counted  # type: ignore[method-assign]
    for query in ("billing team deployed", "who owns the search service", "patch payments"):
        for limit in (1, 3, 5):
            reads.clear()
            short = run_tool(service, "recall", {"query": query, "limit": limit})
            short_reads = sum(reads)
            reads.clear()
            long = run_tool(service, "recall", {"query": query, "limit": 60})
            assert [r["id"] for r in short["results"]] == [
                r["id"] for r in long["results"][:limit]
            ], (query, limit)
            assert [r["score"] for r in short["results"]] == [
                r["score"] for r in long["results"][:limit]
            ]
            assert [r["freshness"]["staleness"] for r in short["results"]] == [
                r["freshness"]["staleness"] for r in long["results"][:limit]
            ]
            # the short page read fewer rows than the long one, from the same candidates
            assert 0 < short_reads < sum(reads), (query, limit, short_reads, sum(reads))


def test_ages_differ_enough_to_reorder(make_service: ServiceFactory) -> None:
    """The store above does make boosts matter: some page is not in relevance order."""
    clock = MovableClock(START)
    service = make_service(clock=clock)
    fill(service, clock)
    clock.advance(1)
    reordered = False
    for query in ("billing team deployed", "who owns the search service", "patch payments"):
        page = run_tool(service, "recall", {"query": query, "limit": 20, "explain": True})
        relevances = [r["explain"]["relevance"] for r in page["results"]]
        reordered = reordered or relevances != sorted(relevances, reverse=True)
    assert reordered
    assert clock.current - START > timedelta(days=150)
