"""Context neighbours: memories stored consecutively in one namespace are context for each other.

A conversation turn rarely answers a question alone: the turn before or after it often holds the
rest ("what did she adopt?" is answered two turns after the name of the shelter). Each of the
top ``retrieval.neighbours.top`` candidates passes credit to the memories stored right before
and after it in the same namespace (storage order, at most ``window`` places away, and stored
within ``gap_seconds`` of it, so a conversation a week later is not context):

    credit = weight x decay^(distance - 1) x relevance(hit)
    relevance' = 1 - (1 - relevance) x prod(1 - credit)      (noisy-OR: stays in [0, 1])
    relevance' = max(relevance, min(relevance', the most relevant hit giving credit))

A neighbour passes credit only when it is about the same thing as the hit (their dense cosine
at least ``min_similarity``), with one exception: a hit that asks a question (a "?" ends one of
the sentences of its last 40 characters) passes the memory stored right after it, its answer,
``answer_weight x relevance(hit)`` whatever their cosine. An answer rarely shares its
question's words ("Who's your favourite player?" / "LeBron, for sure"), and in dialog the turn
after a question is its most likely context (LoCoMo dev: 19% of a top-5 question's next turns
are evidence, 3% of a statement's).

A neighbour that was not a candidate joins the list with the credit alone, and is marked
``included_as: "neighbour"`` (``neighbour_of`` names the hit). Measured in docs/recall.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache

from ferrex.config.recall import NeighbourConfig
from ferrex.core.memory import MemoryType
from ferrex.core.ports import StoredNeighbour

EPISODIC = MemoryType.EPISODIC.value


@dataclass
class NeighbourCredit:
    relevance: dict[str, float]
    joined: dict[str, str] = field(default_factory=dict)  # joined neighbour -> the hit it came by
    # A memory whose relevance the credit raised -> the most relevant hit it is context of (it
    # is never ordered above that hit: core/recall/formulas.py ``cap_context``).
    context_of: dict[str, str] = field(default_factory=dict)


def gap_seconds(a: str, b: str) -> float:
    return abs((_instant(a) - _instant(b)).total_seconds())


@lru_cache(maxsize=4096)
def _instant(text: str) -> datetime:
    """A stored timestamp, parsed once: a recall compares each of ~40 pairs three times."""
    return datetime.fromisoformat(text)


Neighbours = Mapping[str, Sequence[StoredNeighbour]]


QUESTION_MARKS = "?\uff1f\u061f"  # ASCII, full-width (CJK), Arabic
# A question mark not followed by a letter or digit ends a question sentence.
_QUESTION = re.compile(f"[{QUESTION_MARKS}](?!\\w)")
# How far from its end a text's question still makes it ask: 40 characters, the most that
# keeps SciFact unchanged (the sweep over the distance: docs/recall.md, under the answer
# rule's table).
ASK_TAIL = 40


def hit_asks(near: Sequence[StoredNeighbour]) -> bool:
    """Whether the hit these neighbours were found for asks (each row carries it)."""
    return bool(near) and near[0][5]


def asks_question(text: str) -> bool:
    """Whether a text asks a question near its end: a question mark that ends a sentence
    (followed by a space, closing quotes or marks, emoji, or the end; not one inside a word or
    an address) within its last ``ASK_TAIL`` characters. "What breed? I love dogs!" and
    "...about? 😊" ask; "Fine." and "see /search?q=dogs" do not, nor a long text whose only
    question is near its start."""
    return bool(_QUESTION.search(text.rstrip()[-ASK_TAIL:]))


def is_answer(offset: int, hit_asks: bool, config: NeighbourConfig) -> bool:
    """Whether a neighbour is the answer to its hit: stored right after a hit that asks."""
    return hit_asks and offset == 1 and config.answer_weight > 0


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
        for other, offset, created, hit_created, current, _, kind, hit_kind in near:
            if not current or other == hit or not (kind == hit_kind == EPISODIC):
                continue  # (context is between events: a fact or a procedure stands alone)
            if gap_seconds(created, hit_created) > config.gap_seconds:
                continue
            if other not in relevance and not may_join:
                continue
            yield hit, other, offset


def pair_credit(
    hit_relevance: float,
    offset: int,
    asks: bool,
    config: NeighbourConfig,
    similarity: Mapping[tuple[str, str], float] | None,
    pair: tuple[str, str],
) -> float:
    """The credit a hit passes to one neighbour: ``answer_weight x relevance`` to its answer,
    ungated; else ``weight x decay^(distance - 1) x relevance`` if the pair is about the same
    thing (cosine at least ``min_similarity``, where similarities are given); else 0."""
    if is_answer(offset, asks, config):
        return config.answer_weight * hit_relevance
    if similarity is not None and similarity.get(pair, -1.0) < config.min_similarity:
        return 0.0
    return config.weight * config.decay ** (abs(offset) - 1) * hit_relevance


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
    created_at, current, whether the hit asks, its type, the hit's type) —
    ``ports.StoredNeighbour``; only events pass credit to events. Only current
    memories receive credit; ``may_join`` False (a filtered recall) lets credit reach existing
    candidates only.
    With ``similarity`` (the dense cosine of (hit, neighbour) pairs), a pair under
    ``config.min_similarity`` or without one passes no credit: a memory stored next to another
    about something else is not its context. The answer to a hit that asks (``is_answer``) gets
    ``answer_weight`` instead, ungated.
    """
    keep: dict[str, float] = {}  # memory -> product of (1 - credit)
    via: dict[str, tuple[float, str]] = {}
    cap: dict[str, tuple[float, str]] = {}  # memory -> the most relevant hit it is context of
    asks = {hit: hit_asks(near) for hit, near in neighbours.items()}
    for hit, other, offset in context_pairs(relevance, neighbours, config, may_join=may_join):
        credit = pair_credit(relevance[hit], offset, asks[hit], config, similarity, (hit, other))
        if credit <= 0:
            continue  # (decay 0: only the nearest neighbours are context)
        keep[other] = keep.get(other, 1.0) * (1.0 - credit)
        best = cap.get(other)
        if best is None or (-relevance[hit], hit) < (-best[0], best[1]):
            cap[other] = (relevance[hit], hit)  # the most relevant hit; at a tie the first id
        if credit > via.get(other, (0.0, ""))[0]:
            via[other] = (credit, hit)
    out = dict(relevance)
    joined: dict[str, str] = {}
    context_of: dict[str, str] = {}
    for other, product in keep.items():
        own = relevance.get(other)
        lifted = 1.0 - (1.0 - (own or 0.0)) * product
        # Context makes a memory at most as relevant as what it is context of: similar
        # memories stored together do not lift each other over one the query found alone.
        out[other] = max(own or 0.0, min(lifted, cap[other][0]))
        if out[other] > (own or 0.0):
            context_of[other] = cap[other][1]
        if own is None:
            joined[other] = via[other][1]
    return NeighbourCredit(out, joined, context_of)
