"""The engine's filters for ferrex's index queries (``IndexFilter`` -> ``qdrant_edge.Filter``)."""

from __future__ import annotations

from typing import Any

import qdrant_edge as q

from ferrex.core.clock import to_iso
from ferrex.core.ports import IndexFilter, SparseVec


def sparse_vector(vec: SparseVec) -> q.SparseVector:
    return q.SparseVector(list(vec.indices), list(vec.values))


def namespace_filter(flt: IndexFilter) -> q.Filter:
    return q.Filter(must=[q.FieldCondition("namespace", match=q.MatchValue(flt.namespace))])


def _match(values: list[str]) -> Any:
    """One value: ``MatchValue``, which the engine evaluates faster than the same ``MatchAny``
    (a duplicate check's filter at 10,000 points: 2.8 -> 2.0 ms)."""
    return q.MatchValue(values[0]) if len(values) == 1 else q.MatchAny(values)


def index_filter(flt: IndexFilter) -> q.Filter:
    must: list[Any] = [q.FieldCondition("namespace", match=q.MatchValue(flt.namespace))]
    chosen: list[Any] = []
    if flt.memory_ids is not None:
        chosen.append(q.FieldCondition("memory_id", match=q.MatchAny(list(flt.memory_ids))))
    if flt.point_ids is not None:
        chosen.append(q.HasIdCondition(set(flt.point_ids)))
    if chosen:
        must.append(chosen[0] if len(chosen) == 1 else q.Filter(should=chosen))
    if flt.model is not None:
        must.append(q.FieldCondition("model", match=q.MatchValue(flt.model)))
    if flt.types:
        must.append(q.FieldCondition("type", match=_match(list(flt.types))))
    if flt.entity_ids is not None:
        values = [str(e) for e in flt.entity_ids] or ["__none__"]
        must.append(q.FieldCondition("entities", match=_match(values)))
    current = q.IsEmptyCondition("t_invalid")  # "empty" = null or absent
    ranged = flt.time_after is not None or flt.time_before is not None
    if ranged:
        after = to_iso(flt.time_after) if flt.time_after else None
        before = to_iso(flt.time_before) if flt.time_before else None
        semantic = q.FieldCondition("type", match=q.MatchValue("semantic"))
        # Events and procedures: their time inside the range (and current, unless asked).
        others: list[Any] = [q.FieldCondition("time", range=q.RangeDateTime(gte=after, lte=before))]
        if flt.as_of is None and flt.validity == "current":
            others.append(current)
        # Facts: valid at some moment of the range, superseded since or not (spec: historical
        # queries "specify a time range to include invalidated facts").
        facts: list[Any] = [semantic]
        if before is not None:
            facts.append(q.FieldCondition("t_valid", range=q.RangeDateTime(lte=before)))
        if after is not None:
            facts.append(
                q.Filter(
                    should=[
                        current,
                        q.FieldCondition("t_invalid", range=q.RangeDateTime(gt=after)),
                    ]
                )
            )
        must.append(
            q.Filter(should=[q.Filter(must=others, must_not=[semantic]), q.Filter(must=facts)])
        )
    if flt.as_of is not None:
        moment = to_iso(flt.as_of)
        must.append(q.FieldCondition("t_valid", range=q.RangeDateTime(lte=moment)))
        must.append(
            q.Filter(
                should=[
                    q.IsEmptyCondition("t_invalid"),
                    q.FieldCondition("t_invalid", range=q.RangeDateTime(gt=moment)),
                ]
            )
        )
    elif flt.validity == "current" and not ranged:
        # "Empty" = null or absent: a payload refresh with t_invalid=None drops the key.
        must.append(current)
    return q.Filter(must=must)
