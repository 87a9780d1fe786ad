"""Context neighbours: memories stored consecutively in one namespace are context for each other.

A conversation turn rarely answers a question alone: the turn before or after it often holds the
rest ("what did she adopt?" is answered two turns after the name of the shelter). Each of the
top ``retrieval.neighbours.top`` candidates passes credit to the memories stored right before
and after it in the same namespace (storage order, at most ``window`` places away, and stored
within ``gap_seconds`` of it, so a conversation a week later is not context):

    credit = weight x decay^(distance - 1) x relevance(hit)
    relevance' = 1 - (1 - relevance) x prod(1 - credit)      (noisy-OR: stays in [0, 1])
    relevance' = max(relevance, min(relevance', the most relevant hit giving credit))

A neighbour that was not a candidate joins the list with the credit alone, and is marked
``included_as: "neighbour"`` (``neighbour_of`` names the hit). Measured in docs/recall.md.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from ferrex.config import NeighbourConfig


@dataclass
class NeighbourCredit:
    relevance: dict[str, float]
    joined: dict[str, str] = field(default_factory=dict)  # joined neighbour -> the hit it came by


def gap_seconds(a: str, b: str) -> float:
    return abs((datetime.fromisoformat(a) - datetime.fromisoformat(b)).total_seconds())


Neighbours = Mapping[str, Sequence[tuple[str, int, str, str, bool]]]


def context_pairs(
    relevance: Mapping[str, float],
    neighbours: Neighbours,
    config: NeighbourConfig,
    *,
    may_join: bool,
) -> Iterator[tuple[str, str, int]]:
    """The (hit, neighbour, offset) pairs credit may pass along, before the similarity gate:
    a hit with relevance, a current neighbour stored within the gap, one that is a candidate
    unless ``may_join``."""
    for hit, near in neighbours.items():
        if relevance.get(hit, 0.0) <= 0:
            continue
        for other, offset, created, hit_created, current in near:
            if not current or other == hit:
                continue
            if gap_seconds(created, hit_created) > config.gap_seconds:
                continue
            if other not in relevance and not may_join:
                continue
            yield hit, other, offset


def context_credit(
    relevance: Mapping[str, float],
    neighbours: Neighbours,
    config: NeighbourConfig,
    *,
    may_join: bool,
    similarity: Mapping[tuple[str, str], float] | None = None,
) -> NeighbourCredit:
    """New relevance of every candidate (and joined neighbour) after context credit.

    ``neighbours`` maps a hit to its stored neighbours as (id, offset, created_at, the hit's
    created_at, current) — ``MetadataStore.stored_neighbours``. Only current memories receive
    credit; ``may_join`` False (a filtered recall) lets credit reach existing candidates only.
    With ``similarity`` (the dense cosine of (hit, neighbour) pairs), a pair under
    ``config.min_similarity`` or without one passes no credit: a memory stored next to another
    about something else is not its context.
    """
    keep: dict[str, float] = {}  # memory -> product of (1 - credit)
    via: dict[str, tuple[float, str]] = {}
    cap: dict[str, float] = {}  # memory -> the most relevant hit it is context of
    for hit, other, offset in context_pairs(relevance, neighbours, config, may_join=may_join):
        if similarity is not None and similarity.get((hit, other), -1.0) < config.min_similarity:
            continue
        credit = config.weight * config.decay ** (abs(offset) - 1) * relevance[hit]
        if credit <= 0:
            continue  # (decay 0: only the nearest neighbours are context)
        keep[other] = keep.get(other, 1.0) * (1.0 - credit)
        cap[other] = max(cap.get(other, 0.0), relevance[hit])
        if credit > via.get(other, (0.0, ""))[0]:
            via[other] = (credit, hit)
    out = dict(relevance)
    joined: dict[str, str] = {}
    for other, product in keep.items():
        own = relevance.get(other)
        lifted = 1.0 - (1.0 - (own or 0.0)) * product
        # Context makes a memory at most as relevant as what it is context of: similar
        # memories stored together do not lift each other over one the query found alone.
        out[other] = max(own or 0.0, min(lifted, cap[other]))
        if own is None:
            joined[other] = via[other][1]
    return NeighbourCredit(out, joined)
