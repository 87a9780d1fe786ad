"""Which index points a search may return, as a neutral condition tree: the rules (namespace,
model, types, entities, a time range, ``as_of``, current or not) are written once here, and each
index adapter only translates the tree into its client's filter (``store/edge_filter.py``,
``store/qdrant_filters.py``).

The temporal rules (spec: temporal validity):

- current (the default): no ``t_invalid`` ("empty": null or absent — a payload refresh with
  ``t_invalid = None`` may drop the key);
- ``as_of``: valid then — ``t_valid <= as_of`` and (no ``t_invalid`` or ``t_invalid > as_of``);
- a time range: events and procedures whose own time is inside it (and current unless asked or
  ``as_of``); facts valid at some moment of it (``t_valid <= before`` and, with ``after``, no
  ``t_invalid`` or ``t_invalid > after``), superseded since or not — historical queries
  "specify a time range to include invalidated facts".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ferrex.core.ports import IndexFilter


@dataclass(frozen=True)
class Match:
    """The payload ``key`` equals one of ``values``."""

    key: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Range:
    """The payload ``key`` (a date-time) within the given bounds."""

    key: str
    gte: datetime | None = None
    lte: datetime | None = None
    gt: datetime | None = None


@dataclass(frozen=True)
class IsEmpty:
    """The payload ``key`` is null or absent."""

    key: str


@dataclass(frozen=True)
class HasId:
    """The point is one of ``ids``."""

    ids: tuple[str, ...]


@dataclass(frozen=True)
class All:
    """Every ``must`` holds and no ``must_not`` does."""

    must: tuple[Condition, ...]
    must_not: tuple[Condition, ...] = ()


@dataclass(frozen=True)
class AnyOf:
    """At least one of ``should`` holds."""

    should: tuple[Condition, ...]


Condition = Match | Range | IsEmpty | HasId | All | AnyOf

CURRENT = IsEmpty("t_invalid")


def namespace_only(flt: IndexFilter) -> All:
    return All((Match("namespace", (flt.namespace,)),))


def conditions(flt: IndexFilter) -> All:
    """The points ``flt`` selects."""
    must: list[Condition] = [Match("namespace", (flt.namespace,))]
    chosen: list[Condition] = []
    if flt.memory_ids is not None:
        chosen.append(Match("memory_id", flt.memory_ids))
    if flt.point_ids is not None:
        chosen.append(HasId(flt.point_ids))
    if chosen:
        must.append(chosen[0] if len(chosen) == 1 else AnyOf(tuple(chosen)))
    if flt.model is not None:
        must.append(Match("model", (flt.model,)))
    if flt.types:
        must.append(Match("type", flt.types))
    if flt.entity_ids is not None:
        must.append(Match("entities", tuple(str(e) for e in flt.entity_ids) or ("__none__",)))
    ranged = flt.time_after is not None or flt.time_before is not None
    if ranged:
        must.append(_in_range(flt))
    if flt.as_of is not None:
        moment = flt.as_of
        must.append(Range("t_valid", lte=moment))
        must.append(AnyOf((CURRENT, Range("t_invalid", gt=moment))))
    elif flt.validity == "current" and not ranged:
        must.append(CURRENT)
    return All(tuple(must))


def _in_range(flt: IndexFilter) -> AnyOf:
    after, before = flt.time_after, flt.time_before
    semantic = Match("type", ("semantic",))
    # Events and procedures: their time inside the range (and current, unless asked).
    others: list[Condition] = [Range("time", gte=after, lte=before)]
    if flt.as_of is None and flt.validity == "current":
        others.append(CURRENT)
    # Facts: valid at some moment of the range, superseded since or not.
    facts: list[Condition] = [semantic]
    if before is not None:
        facts.append(Range("t_valid", lte=before))
    if after is not None:
        facts.append(AnyOf((CURRENT, Range("t_invalid", gt=after))))
    return AnyOf((All(tuple(others), must_not=(semantic,)), All(tuple(facts))))
