"""Payload filters of the qdrant-client adapter: ``core/conditions.py``'s tree as a
``models.Filter`` (the rules are written there once, for both engines)."""

from __future__ import annotations

from typing import Any

from qdrant_client import models

from ferrex.core.conditions import (
    All,
    AnyOf,
    Condition,
    HasId,
    IsEmpty,
    Match,
    Range,
    conditions,
    namespace_only,
)
from ferrex.core.ports import IndexFilter


def namespace_filter(flt: IndexFilter) -> models.Filter:
    return _filter(namespace_only(flt))


def to_filter(flt: IndexFilter) -> models.Filter:
    """The client's filter for ``flt`` (the rules: ``core/conditions.py``)."""
    return _filter(conditions(flt))


def _filter(node: All) -> models.Filter:
    must_not = [_condition(c) for c in node.must_not]
    return models.Filter(must=[_condition(c) for c in node.must], must_not=must_not or None)


def _condition(node: Condition) -> Any:
    if isinstance(node, Match):
        values = list(node.values)
        match: Any = (
            models.MatchValue(value=values[0]) if len(values) == 1 else models.MatchAny(any=values)
        )
        return models.FieldCondition(key=node.key, match=match)
    if isinstance(node, Range):
        return models.FieldCondition(
            key=node.key, range=models.DatetimeRange(gte=node.gte, lte=node.lte, gt=node.gt)
        )
    if isinstance(node, IsEmpty):
        return models.IsEmptyCondition(is_empty=models.PayloadField(key=node.key))
    if isinstance(node, HasId):
        return models.HasIdCondition(has_id=list(node.ids))
    if isinstance(node, AnyOf):
        return models.Filter(should=[_condition(c) for c in node.should])
    return _filter(node)
