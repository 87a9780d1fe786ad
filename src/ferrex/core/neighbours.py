"""Context neighbours: memories stored consecutively in one namespace are context for each other.

A conversation turn rarely answers a question alone: the turn before or after it often holds the
rest ("what did she adopt?" is answered two turns after the name of the shelter). Each of the
top ``retrieval.neighbours.top`` candidates passes credit to the memories stored right before
and after it in the same namespace (storage order, at most ``window`` places away, and stored
within ``gap_seconds`` of it, so a conversation a week later is not context):

    credit = weight x decay^(distance - 1) x relevance(hit)
    relevance' = 1 - (1 - relevance) x prod(1 - credit)      (noisy-OR: stays in [0, 1])

A neighbour that was not a candidate joins the list with the credit alone, and is marked
``included_as: "neighbour"`` (``neighbour_of`` names the hit). Measured in docs/recall.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from ferrex.config import NeighbourConfig


@dataclass
class NeighbourCredit:
    relevance: dict[str, float]
    joined: dict[str, str] = field(default_factory=dict)  # joined neighbour -> the hit it came by


def gap_seconds(a: str, b: str) -> float:
    return abs((datetime.fromisoformat(a) - datetime.fromisoformat(b)).total_seconds())


def context_credit(
    relevance: Mapping[str, float],
    neighbours: Mapping[str, Sequence[tuple[str, int, str, str, bool]]],
    config: NeighbourConfig,
    *,
    may_join: bool,
) -> NeighbourCredit:
    """New relevance of every candidate (and joined neighbour) after context credit.

    ``neighbours`` maps a hit to its stored neighbours as (id, offset, created_at, the hit's
    created_at, current) — ``MetadataStore.stored_neighbours``. Only current memories receive
    credit; ``may_join`` False (a filtered recall) lets credit reach existing candidates only.
    """
    keep: dict[str, float] = {}  # memory -> product of (1 - credit)
    via: dict[str, tuple[float, str]] = {}
    for hit, near in neighbours.items():
        base = relevance.get(hit, 0.0)
        if base <= 0:
            continue
        for other, offset, created, hit_created, current in near:
            if not current or other == hit:
                continue
            if gap_seconds(created, hit_created) > config.gap_seconds:
                continue
            if other not in relevance and not may_join:
                continue
            credit = config.weight * config.decay ** (abs(offset) - 1) * base
            keep[other] = keep.get(other, 1.0) * (1.0 - credit)
            if credit > via.get(other, (0.0, ""))[0]:
                via[other] = (credit, hit)
    out = dict(relevance)
    joined: dict[str, str] = {}
    for other, product in keep.items():
        own = relevance.get(other)
        out[other] = 1.0 - (1.0 - (own or 0.0)) * product
        if own is None:
            joined[other] = via[other][1]
    return NeighbourCredit(out, joined)
