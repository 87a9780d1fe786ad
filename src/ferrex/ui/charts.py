"""Bar charts for the stats page, as the numbers an SVG template draws (no chart library:
a handful of rectangles, rendered on the server, readable without JavaScript)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Bar:
    label: str
    value: int
    share: float  # of the largest value, in [0, 1]


@dataclass(frozen=True)
class Segment:
    kind: str
    value: int
    start: float  # of the tallest column, in [0, 1]
    share: float


@dataclass(frozen=True)
class Column:
    label: str
    total: int
    segments: list[Segment]


def bars(values: Mapping[str, int], order: Sequence[str]) -> list[Bar]:
    """One bar per label of ``order`` (missing labels count 0), scaled to the largest."""
    counted = [(label, int(values.get(label, 0) or 0)) for label in order]
    top = max((value for _, value in counted), default=0)
    return [Bar(label, value, value / top if top else 0.0) for label, value in counted]


def stacked(
    labels: Sequence[str], series: Mapping[str, Sequence[int]], kinds: Sequence[str]
) -> list[Column]:
    """Columns (one per label) of segments stacked in the order of ``kinds``, scaled to the
    tallest column."""
    empty = [0] * len(labels)
    totals = [sum(int(series.get(k, empty)[i]) for k in kinds) for i in range(len(labels))]
    top = max(totals, default=0)
    columns = []
    for i, label in enumerate(labels):
        start, segments = 0.0, []
        for kind in kinds:
            value = int(series.get(kind, empty)[i])
            share = value / top if top else 0.0
            segments.append(Segment(kind, value, start, share))
            start += share
        columns.append(Column(label, totals[i], segments))
    return columns
