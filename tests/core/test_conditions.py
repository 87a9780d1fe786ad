"""The index's temporal-validity rules, written once in ``core/conditions.py`` and translated by
each engine adapter: checked here at their boundaries with a small evaluator of the neutral
tree (the engines' own evaluation is checked end to end by test_engine_parity.py and the
as_of / time-range tests through MCP)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ferrex.core.conditions import All, AnyOf, Condition, HasId, IsEmpty, Match, Range, conditions
from ferrex.core.ports import IndexFilter

T = datetime(2026, 6, 1, tzinfo=UTC)
DAY = timedelta(days=1)


def holds(node: Condition, point: dict[str, Any]) -> bool:
    if isinstance(node, Match):
        value = point.get(node.key)
        values = value if isinstance(value, list) else [value]
        return any(v in node.values for v in values)
    if isinstance(node, Range):
        at = point.get(node.key)
        if at is None:
            return False
        return (
            (node.gte is None or at >= node.gte)
            and (node.lte is None or at <= node.lte)
            and (node.gt is None or at > node.gt)
        )
    if isinstance(node, IsEmpty):
        return point.get(node.key) is None
    if isinstance(node, HasId):
        return point.get("id") in node.ids
    if isinstance(node, AnyOf):
        return any(holds(c, point) for c in node.should)
    assert isinstance(node, All)
    return all(holds(c, point) for c in node.must) and not any(
        holds(c, point) for c in node.must_not
    )


def fact(t_valid: datetime, t_invalid: datetime | None = None) -> dict[str, Any]:
    return {
        "namespace": "ns",
        "type": "semantic",
        "t_valid": t_valid,
        "t_invalid": t_invalid,
        "time": t_valid,
        "entities": ["7"],
    }


def event(time: datetime, t_invalid: datetime | None = None) -> dict[str, Any]:
    return {
        "namespace": "ns",
        "type": "episodic",
        "time": time,
        "t_valid": time,
        "t_invalid": t_invalid,
        "entities": [],
    }


@pytest.mark.parametrize(
    ("point", "expected"),
    [
        (fact(T - DAY), True),  # current
        (fact(T - 2 * DAY, T - DAY), False),  # ended
        ({**fact(T - DAY), "namespace": "other"}, False),
    ],
)
def test_current_by_default(point: dict[str, Any], expected: bool) -> None:
    assert holds(conditions(IndexFilter("ns")), point) is expected


@pytest.mark.parametrize(
    ("point", "expected"),
    [
        (fact(T), True),  # t_valid == as_of: valid then
        (fact(T + timedelta(seconds=1)), False),  # starts after
        (fact(T - DAY, T), False),  # t_invalid == as_of: already ended
        (fact(T - DAY, T + timedelta(seconds=1)), True),  # ends after: valid then
        (fact(T - DAY), True),
    ],
)
def test_as_of_boundaries(point: dict[str, Any], expected: bool) -> None:
    assert holds(conditions(IndexFilter("ns", as_of=T)), point) is expected


@pytest.mark.parametrize(
    ("point", "expected"),
    [
        (event(T), True),  # an event at the range's start
        (event(T + 2 * DAY), True),  # at its end
        (event(T - timedelta(seconds=1)), False),
        (event(T + DAY, T + DAY), False),  # superseded: current only, unless asked
        (fact(T - 10 * DAY, T + timedelta(seconds=1)), True),  # valid into the range
        (fact(T - 10 * DAY, T), False),  # ended as the range starts
        (fact(T + 2 * DAY), True),  # starts at its end
        (fact(T + 2 * DAY + timedelta(seconds=1)), False),
    ],
)
def test_time_range_boundaries(point: dict[str, Any], expected: bool) -> None:
    flt = IndexFilter("ns", time_after=T, time_before=T + 2 * DAY)
    assert holds(conditions(flt), point) is expected


def test_a_range_with_invalidated_includes_ended_events() -> None:
    flt = IndexFilter("ns", time_after=T, time_before=T + 2 * DAY, validity="all")
    assert holds(conditions(flt), event(T + DAY, T + DAY))


def test_no_entity_matches_nothing() -> None:
    flt = IndexFilter("ns", entity_ids=())
    assert not holds(conditions(flt), fact(T - DAY))
    assert holds(conditions(IndexFilter("ns", entity_ids=(7,))), fact(T - DAY))
