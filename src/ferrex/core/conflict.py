"""Conflict detection and temporal validity for semantic facts (spec "Conflict Detection").

Existing current facts are matched on (resolved subject, canonical predicate). The objects are
compared in stages: similarity >= 0.95 -> duplicate (keep the higher confidence, bump
last_validated); < 0.5 -> a different value; in between -> decided by the cosine of the objects'
embeddings. A different value invalidates the old fact (t_invalid = the incoming t_valid) unless
the incoming fact is older (it is then stored as already superseded) or has lower confidence than
the current one (both stay current and are flagged as a contradiction for the agent to resolve).
Multi-valued predicates store both values, with no invalidation.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from rapidfuzz import fuzz

from ferrex.core.memory import Memory

_NUMBER = re.compile(r"\d+(?:\.\d+)*")
_SPACES = re.compile(r"\s+")


class Outcome(StrEnum):
    NEW = "new"  # no current fact for (subject, predicate)
    DUPLICATE = "duplicate"  # same value: existing fact kept and validated
    SUPERSEDED = "superseded"  # different value: the old fact(s) invalidated
    HISTORICAL = "historical"  # incoming is older than the current fact: stored already invalid
    CONTRADICTION = "contradiction"  # lower confidence than the current fact: both kept, flagged
    MULTI_VALUED = "multi_valued"  # predicate holds several values: both kept


@dataclass(frozen=True)
class ObjectSimilarity:
    score: float
    method: str  # "exact" | "numbers" | "string" | "embedding"


@dataclass
class ConflictDecision:
    outcome: Outcome
    similarity: ObjectSimilarity | None = None
    duplicate_of: Memory | None = None
    invalidate: list[Memory] = field(default_factory=list)
    contradicts: list[Memory] = field(default_factory=list)
    new_t_invalid: datetime | None = None
    superseded_by_existing: Memory | None = None


def normalize_object(value: str) -> str:
    return _SPACES.sub(" ", value.strip().lower())


def object_similarity(
    incoming: str,
    existing: str,
    *,
    different_below: float,
    duplicate_at: float,
    embedding_cosine: Callable[[str, str], float],
) -> ObjectSimilarity:
    """Staged object similarity: exact, number guard, string ratio, then embedding cosine."""
    a, b = normalize_object(incoming), normalize_object(existing)
    if a == b:
        return ObjectSimilarity(1.0, "exact")
    if _NUMBER.findall(a) != _NUMBER.findall(b):
        # "tokio 1.36" vs "tokio 1.38": strings and embeddings look alike, the values differ.
        return ObjectSimilarity(0.0, "numbers")
    ratio = fuzz.ratio(a, b) / 100.0
    if ratio >= duplicate_at or ratio < different_below:
        return ObjectSimilarity(ratio, "string")
    return ObjectSimilarity(float(embedding_cosine(incoming, existing)), "embedding")


def decide(
    *,
    incoming_object: str,
    incoming_confidence: float,
    incoming_t_valid: datetime,
    current: Sequence[Memory],
    multi_valued: bool,
    duplicate_threshold: float,
    different_threshold: float,
    embedding_duplicate_threshold: float,
    embedding_cosine: Callable[[str, str], float],
    history: Sequence[Memory] = (),
) -> ConflictDecision:
    """Decide what storing a fact does, given the current facts with the same subject+predicate
    (and ``history``, its superseded facts: an older value ends where the next one began)."""
    if not current:
        return ConflictDecision(Outcome.NEW)
    best: tuple[ObjectSimilarity, Memory] | None = None
    for fact in current:
        similarity = object_similarity(
            incoming_object,
            fact.object or "",
            different_below=different_threshold,
            duplicate_at=duplicate_threshold,
            embedding_cosine=embedding_cosine,
        )
        if best is None or similarity.score > best[0].score:
            best = (similarity, fact)
    assert best is not None
    similarity, closest = best
    threshold = (
        embedding_duplicate_threshold if similarity.method == "embedding" else duplicate_threshold
    )
    if similarity.score >= threshold:
        return ConflictDecision(Outcome.DUPLICATE, similarity, duplicate_of=closest)
    if multi_valued:
        return ConflictDecision(Outcome.MULTI_VALUED, similarity)
    newer = [f for f in current if f.t_valid is not None and f.t_valid > incoming_t_valid]
    if newer:
        # The incoming value was true before the current one: keep it as history, ending where
        # the next known value (current or itself superseded since) began.
        later = newer + [
            f for f in history if f.t_valid is not None and f.t_valid > incoming_t_valid
        ]
        earliest = min(later, key=lambda f: (f.t_valid, f.id))
        return ConflictDecision(
            Outcome.HISTORICAL,
            similarity,
            new_t_invalid=earliest.t_valid,
            superseded_by_existing=earliest,
        )
    stronger = [f for f in current if f.confidence > incoming_confidence]
    if stronger:
        return ConflictDecision(Outcome.CONTRADICTION, similarity, contradicts=list(current))
    return ConflictDecision(Outcome.SUPERSEDED, similarity, invalidate=list(current))


def contradiction_groups(
    facts: Sequence[Memory],
) -> dict[tuple[int | None, str | None], list[Memory]]:
    """Group current, single-valued facts by (subject, predicate) where objects differ (Layer 4)."""
    groups: dict[tuple[int | None, str | None], list[Memory]] = {}
    for fact in facts:
        if fact.t_invalid is not None or fact.multi_valued:
            continue
        groups.setdefault((fact.subject_entity_id, fact.predicate_canonical), []).append(fact)
    return {
        key: members
        for key, members in groups.items()
        if len(members) > 1 and len({normalize_object(m.object or "") for m in members}) > 1
    }
