"""Conflict detection and temporal validity for semantic facts (spec "Conflict Detection").

Existing current facts are matched on (resolved subject, canonical predicate). The objects are
compared in stages: similarity >= 0.95 -> duplicate (keep the higher confidence, bump
last_validated); < 0.5 -> a different value; in between -> decided by the cosine of the objects'
embeddings. A different value invalidates the old fact (t_invalid = the incoming t_valid) unless
the incoming fact is older (it is then stored as already superseded) or has lower confidence than
the current one (both stay current and are flagged as a contradiction for the agent to resolve).
Multi-valued predicates store both values, with no invalidation.

Keyed predicates (``conflict.keyed_predicates``, default the depends_on family) hold named,
versioned values: the incoming value is compared with the current values *of the same name*
(its text without version numbers: "tokio 1.36" and "tokio 1.38" are both "tokio"), which it may
supersede as above, and sits next to values of other names like a multi-valued predicate
("fastapi 0.110" and "pydantic 2.7" are both current).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from rapidfuzz import fuzz
from rapidfuzz.distance import JaroWinkler

from ferrex.core.matching.distinguishing import differ
from ferrex.core.memory import Memory

_SPACES = re.compile(r"\s+")
# A version in a value: "1.38", "v2", "^1.2.3", ">=0.100", "@4.1.0-beta.2", "1.x".
_VERSION = re.compile(r"(?:[\^~<>=@]+\s*|\bv)?\d+(?:\.(?:\d+|x|\*))*(?:[-+][\w.]+)?", re.I)
_VERSION_WORDS = re.compile(r"\b(?:version|release|ver)\b", re.I)
NAME_TYPO_THRESHOLD = 0.95


class Verdict(StrEnum):
    """What the conflict rules decide for an incoming fact (the store answer's status is
    ``core.results.Outcome``)."""

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
    outcome: Verdict
    similarity: ObjectSimilarity | None = None
    duplicate_of: Memory | None = None
    invalidate: list[Memory] = field(default_factory=list)
    contradicts: list[Memory] = field(default_factory=list)
    new_t_invalid: datetime | None = None
    superseded_by_existing: Memory | None = None
    # Keyed predicates: current values of other names, which stay current next to this one.
    coexists: list[Memory] = field(default_factory=list)


def normalize_object(value: str) -> str:
    return _SPACES.sub(" ", value.strip().lower())


def value_name(value: str) -> str:
    """A keyed value without its version: "FastAPI 0.110" -> "fastapi"; "1.38" -> ""."""
    text = _VERSION_WORDS.sub(" ", _VERSION.sub(" ", normalize_object(value)))
    return " ".join(re.sub(r"[^\w\s.+#/-]", " ", text).split()).strip(" .-/")


def same_value_name(a: str, b: str) -> bool:
    """Two value names of one thing (equal, or a spelling variant: "postgres" / "postgresql")."""
    return a == b or (bool(a) and bool(b) and JaroWinkler.similarity(a, b) > NAME_TYPO_THRESHOLD)


def object_similarity(
    incoming: str,
    existing: str,
    *,
    different_below: float,
    duplicate_at: float,
    embedding_cosine: Callable[[str, str], float],
) -> ObjectSimilarity:
    """Staged object similarity: exact, distinguishing-token guard (numbers, versions, ids,
    dates, polarity), string ratio, then embedding cosine."""
    a, b = normalize_object(incoming), normalize_object(existing)
    if a == b:
        return ObjectSimilarity(1.0, "exact")
    if differ(a, b):
        # "tokio 1.36" vs "tokio 1.38", "passing" vs "failing": strings and embeddings look
        # alike, the values differ (core/matching/distinguishing.py).
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
    keyed: bool = False,
) -> ConflictDecision:
    """Decide what storing a fact does, given the current facts with the same subject+predicate
    (and ``history``, its superseded facts: an older value ends where the next one began).
    ``keyed``: the predicate holds named values (module docstring)."""
    if keyed and value_name(incoming_object):
        name = value_name(incoming_object)
        same = [f for f in current if same_value_name(value_name(f.object or ""), name)]
        others = [f for f in current if f not in same]
        if not same:
            return (
                ConflictDecision(Verdict.MULTI_VALUED, coexists=others)
                if others
                else ConflictDecision(Verdict.NEW)
            )
        decision = decide(
            incoming_object=incoming_object,
            incoming_confidence=incoming_confidence,
            incoming_t_valid=incoming_t_valid,
            current=same,
            multi_valued=False,
            duplicate_threshold=duplicate_threshold,
            different_threshold=different_threshold,
            embedding_duplicate_threshold=embedding_duplicate_threshold,
            embedding_cosine=embedding_cosine,
            history=[f for f in history if same_value_name(value_name(f.object or ""), name)],
        )
        decision.coexists = others
        return decision
    if not current:
        return ConflictDecision(Verdict.NEW)
    similarity, closest = _closest(
        incoming_object,
        current,
        different_threshold=different_threshold,
        duplicate_threshold=duplicate_threshold,
        embedding_cosine=embedding_cosine,
    )
    threshold = (
        embedding_duplicate_threshold if similarity.method == "embedding" else duplicate_threshold
    )
    if similarity.score >= threshold:
        return ConflictDecision(Verdict.DUPLICATE, similarity, duplicate_of=closest)
    if multi_valued:
        return ConflictDecision(Verdict.MULTI_VALUED, similarity)
    return _replace_or_keep(similarity, current, history, incoming_confidence, incoming_t_valid)


def _closest(
    incoming_object: str,
    current: Sequence[Memory],
    *,
    different_threshold: float,
    duplicate_threshold: float,
    embedding_cosine: Callable[[str, str], float],
) -> tuple[ObjectSimilarity, Memory]:
    """The current fact whose value is most like the incoming one, and how alike."""
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
    return best


def _replace_or_keep(
    similarity: ObjectSimilarity,
    current: Sequence[Memory],
    history: Sequence[Memory],
    incoming_confidence: float,
    incoming_t_valid: datetime,
) -> ConflictDecision:
    """A different value of a single-valued predicate: history (the current one is newer), a
    contradiction (the current one is more confident), or the new current value."""
    newer = [f for f in current if f.t_valid is not None and f.t_valid > incoming_t_valid]
    if newer:
        # The incoming value was true before the current one: keep it as history, ending where
        # the next known value (current or itself superseded since) began.
        later = newer + [
            f for f in history if f.t_valid is not None and f.t_valid > incoming_t_valid
        ]
        earliest = min(later, key=lambda f: (f.t_valid, f.id))
        return ConflictDecision(
            Verdict.HISTORICAL,
            similarity,
            new_t_invalid=earliest.t_valid,
            superseded_by_existing=earliest,
        )
    if any(f.confidence > incoming_confidence for f in current):
        return ConflictDecision(Verdict.CONTRADICTION, similarity, contradicts=list(current))
    return ConflictDecision(Verdict.SUPERSEDED, similarity, invalidate=list(current))


@dataclass(frozen=True)
class LookAlike:
    """A current fact the incoming one would have replaced, matched to it only because a
    subject or predicate name looked alike (Jaro-Winkler or embedding stage)."""

    fact: Memory
    field: str  # "subject" | "predicate"
    name: str  # the incoming fact's name
    other: str  # the name the existing fact was stated with


def look_alikes(
    decision: ConflictDecision,
    *,
    subject: str,
    predicate: str,
    same_subject: Callable[[str, str], bool],
    same_predicate: Callable[[str, str], bool],
) -> list[LookAlike]:
    """The facts ``decision`` would end (or put after the incoming value, as its successor)
    although they were stated under another subject or predicate name.

    A subject or predicate matched exactly, through an alias or through the synonym table
    supersedes as the design says ("uses" -> "depends-on"); one matched only by the fuzzy or
    embedding stage ("auth service" / "auth server", "http_port" / "https_port") may name
    another thing, so it never overwrites a current fact: both stay current and the answer
    says so (``possible_alias``). Names compare as ``same_subject`` / ``same_predicate`` say
    (normalized spelling; for predicates also one synonym family)."""
    affected = list(decision.invalidate)
    if decision.outcome is Verdict.HISTORICAL and decision.superseded_by_existing is not None:
        affected.append(decision.superseded_by_existing)
    found: list[LookAlike] = []
    for fact in affected:
        if fact.subject is not None and not same_subject(fact.subject, subject):
            found.append(LookAlike(fact, "subject", subject, fact.subject))
        elif fact.predicate is not None and not same_predicate(fact.predicate, predicate):
            found.append(LookAlike(fact, "predicate", predicate, fact.predicate))
    return found


def stated_alike(
    fact: Memory,
    *,
    subject: str,
    predicate: str,
    same_subject: Callable[[str, str], bool],
    same_predicate: Callable[[str, str], bool],
) -> bool:
    """Whether ``fact`` was stated with the incoming subject and predicate (see look_alikes)."""
    return (fact.subject is None or same_subject(fact.subject, subject)) and (
        fact.predicate is None or same_predicate(fact.predicate, predicate)
    )


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
