"""The engine's filters for ferrex's index queries (``IndexFilter`` -> ``qdrant_edge.Filter``)."""

from __future__ import annotations

from typing import Any

import qdrant_edge as q

from ferrex.core.clock import to_iso
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
from ferrex.core.ports import IndexFilter, SparseVec


def sparse_vector(vec: SparseVec) -> q.SparseVector:
    return q.SparseVector(list(vec.indices), list(vec.values))


def namespace_filter(flt: IndexFilter) -> q.Filter:
    return _filter(namespace_only(flt))


def index_filter(flt: IndexFilter) -> q.Filter:
    """The engine's filter for ``flt`` (the rules: ``core/conditions.py``)."""
    return _filter(conditions(flt))


def _filter(node: All) -> q.Filter:
    must_not = [_condition(c) for c in node.must_not]
    return q.Filter(must=[_condition(c) for c in node.must], must_not=must_not or None)


def _condition(node: Condition) -> Any:
    if isinstance(node, Match):
        values = list(node.values)
        # One value: ``MatchValue``, which the engine evaluates faster than the same
        # ``MatchAny`` (a duplicate check's filter at 10,000 points: 2.8 -> 2.0 ms).
        match = q.MatchValue(values[0]) if len(values) == 1 else q.MatchAny(values)
        return q.FieldCondition(node.key, match=match)
    if isinstance(node, Range):
        bounds = {"gte": node.gte, "lte": node.lte, "gt": node.gt}
        given = {name: to_iso(at) for name, at in bounds.items() if at is not None}
        return q.FieldCondition(node.key, range=q.RangeDateTime(**given))
    if isinstance(node, IsEmpty):
        return q.IsEmptyCondition(node.key)  # "empty" = null or absent
    if isinstance(node, HasId):
        return q.HasIdCondition(set(node.ids))
    if isinstance(node, AnyOf):
        return q.Filter(should=[_condition(c) for c in node.should])
    return _filter(node)
