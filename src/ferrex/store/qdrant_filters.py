"""Payload filters of the qdrant-client adapter: ``IndexFilter`` as a ``models.Filter`` (the same
rules as the embedded engine's, store/edge.py)."""

from __future__ import annotations

from typing import Any

from qdrant_client import models

from ferrex.core.ports import IndexFilter


def namespace_filter(flt: IndexFilter) -> models.Filter:
    return models.Filter(
        must=[models.FieldCondition(key="namespace", match=models.MatchValue(value=flt.namespace))]
    )


def to_filter(flt: IndexFilter) -> models.Filter:
    must: list[Any] = [
        models.FieldCondition(key="namespace", match=models.MatchValue(value=flt.namespace))
    ]
    chosen: list[Any] = []
    if flt.memory_ids is not None:
        chosen.append(
            models.FieldCondition(key="memory_id", match=models.MatchAny(any=list(flt.memory_ids)))
        )
    if flt.point_ids is not None:
        chosen.append(models.HasIdCondition(has_id=list(flt.point_ids)))
    if chosen:
        must.append(chosen[0] if len(chosen) == 1 else models.Filter(should=chosen))
    if flt.model is not None:
        must.append(models.FieldCondition(key="model", match=models.MatchValue(value=flt.model)))
    if flt.types:
        must.append(models.FieldCondition(key="type", match=models.MatchAny(any=list(flt.types))))
    if flt.entity_ids is not None:
        values = [str(e) for e in flt.entity_ids] or ["__none__"]
        must.append(models.FieldCondition(key="entities", match=models.MatchAny(any=values)))
    current = models.IsEmptyCondition(is_empty=models.PayloadField(key="t_invalid"))
    ranged = flt.time_after is not None or flt.time_before is not None
    if ranged:
        after = flt.time_after
        before = flt.time_before
        semantic = models.FieldCondition(key="type", match=models.MatchValue(value="semantic"))
        # Events and procedures: their time inside the range (and current, unless asked).
        others: list[Any] = [
            models.FieldCondition(key="time", range=models.DatetimeRange(gte=after, lte=before))
        ]
        if flt.as_of is None and flt.validity == "current":
            others.append(current)
        # Facts: valid at some moment of the range, superseded since or not (see edge.py).
        facts: list[Any] = [semantic]
        if before is not None:
            facts.append(
                models.FieldCondition(key="t_valid", range=models.DatetimeRange(lte=before))
            )
        if after is not None:
            facts.append(
                models.Filter(
                    should=[
                        current,
                        models.FieldCondition(
                            key="t_invalid", range=models.DatetimeRange(gt=after)
                        ),
                    ]
                )
            )
        must.append(
            models.Filter(
                should=[
                    models.Filter(must=others, must_not=[semantic]),
                    models.Filter(must=facts),
                ]
            )
        )
    if flt.as_of is not None:
        moment = flt.as_of
        must.append(models.FieldCondition(key="t_valid", range=models.DatetimeRange(lte=moment)))
        must.append(
            models.Filter(
                should=[
                    models.IsEmptyCondition(is_empty=models.PayloadField(key="t_invalid")),
                    models.FieldCondition(key="t_invalid", range=models.DatetimeRange(gt=moment)),
                ]
            )
        )
    elif flt.validity == "current" and not ranged:
        # "Empty" = null or absent: a payload refresh with t_invalid=None may drop the key.
        must.append(current)
    return models.Filter(must=must)
