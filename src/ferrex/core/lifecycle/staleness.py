"""Staleness safeguards (spec "Staleness Safeguards", Layers 2, 3 and 6).

The staleness score is an *effective age in days* that the per-type thresholds classify:
fresh < ``fresh``; stale >= ``stale``; aging in between.

    age  = days since the memory was created (spec: "since creation or last update")
    base = semantic:   days since last validation (spec: "since last validation")
           otherwise: (w_age * age + w_validated * days_since_validation) / (w_age + w_validated)
    credit = w_accessed * 2^(-days_since_access / 30) + w_access_count * min(1, ln(1+n) / ln(101))
    score = base * (1 - credit)

Age is counted from ``created_at`` for every type. A ferrex row is never edited in place: an
update is a new row (a superseding fact, a new procedure version), so a row's creation is its
last update. Supersession is not a content update (it only closes the old row's validity), and
an episode's *event* time (``timestamp``) is what the memory is about, not when ferrex learnt
it: an event from last spring stored today is a fresh memory. The event time keeps its own
roles (``time_range`` filters, date terms, the result's ``timestamp``).

Age and validation carry the high weights (0.45 each); access recency and count the low ones
(0.05 each). The *level* (fresh / aging / stale) depends on the base alone: retrieval is not
validation (Layer 3), so no amount of recalling moves a memory to a fresher level. The access
credit only lowers the continuous ``score`` (by at most 10%), which orders memories within a
level. A memory never validated counts its validation age from when it was stored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ferrex.config.lifecycle import StalenessConfig, StalenessWeights, Thresholds
from ferrex.core.clock import days_between, to_iso
from ferrex.core.memory import Memory, MemoryType

FRESH = "fresh"
AGING = "aging"
STALE = "stale"
SUPERSEDED = "superseded"
ACCESS_HALF_LIFE_DAYS = 30.0
ACCESS_COUNT_SATURATION = 100


def age_days(memory: Memory, now: datetime) -> float:
    """Days since the memory was created, whatever its type (module docstring)."""
    return days_between(memory.created_at, now)


def days_since_validation(memory: Memory, now: datetime) -> float:
    """Days since the last explicit validation; never validated counts from creation."""
    if memory.last_validated is not None:
        return days_between(memory.last_validated, now)
    return age_days(memory, now)


def access_credit(memory: Memory, now: datetime, weights: StalenessWeights) -> float:
    recency = 0.0
    if memory.last_accessed is not None:
        recency = 2.0 ** (-days_between(memory.last_accessed, now) / ACCESS_HALF_LIFE_DAYS)
    count = min(1.0, math.log1p(max(0, memory.access_count)) / math.log1p(ACCESS_COUNT_SATURATION))
    return weights.accessed * recency + weights.access_count * count


def staleness_score(memory: Memory, now: datetime, weights: StalenessWeights) -> float:
    """Effective age in days (see module docstring)."""
    return base_score(memory, now, weights) * (1.0 - access_credit(memory, now, weights))


def base_score(memory: Memory, now: datetime, weights: StalenessWeights) -> float:
    """The score from age and validation alone (no access credit)."""
    since_validation = days_since_validation(memory, now)
    if memory.type is MemoryType.SEMANTIC:
        base = since_validation
    else:
        total = weights.age + weights.validated
        if total <= 0:
            base = age_days(memory, now)
        else:
            base = (
                weights.age * age_days(memory, now) + weights.validated * since_validation
            ) / total
    return base


CONFIDENCE_REVIEW_BELOW = 0.5


def effective_confidence(memory: Memory, now: datetime, config: StalenessConfig) -> float:
    """A fact's confidence decayed by the time since it was last validated (Layer 5: "facts
    with decaying confidence scores"): ``confidence x 2^(-days / H)`` with H the namespace's
    semantic ``stale`` threshold, so an unconfirmed fact's confidence halves by the time it
    goes stale (0.9 -> 0.45 at 180 days by default; slower where a namespace keeps facts longer).
    Other types keep their stored confidence."""
    if memory.type is not MemoryType.SEMANTIC:
        return memory.confidence
    half_life = config.thresholds(memory.namespace, "semantic").stale
    if half_life <= 0:
        return memory.confidence
    return memory.confidence * 2.0 ** (-days_since_validation(memory, now) / half_life)


def needs_validation(memory: Memory, now: datetime, config: StalenessConfig) -> bool:
    """A current memory nobody has confirmed within its type's fresh window (Layer 5).

    Never validated counts from when the memory was stored, so a fresh memory never needs
    validation yet. Retrieval does not count (Layer 3): a popular memory still needs an
    explicit confirmation.
    """
    if memory.t_invalid is not None:
        return False
    thresholds = config.thresholds(memory.namespace, memory.type.value)
    return days_since_validation(memory, now) >= thresholds.fresh


def level_for(base: float, thresholds: Thresholds) -> str:
    """fresh / aging / stale of a *base* score (age and validation, no access credit):
    retrieval never changes a memory's level (Layer 3), only validation and time do."""
    if base < thresholds.fresh:
        return FRESH
    if base >= thresholds.stale:
        return STALE
    return AGING


@dataclass(frozen=True)
class Freshness:
    age_days: int
    last_accessed: str | None
    last_validated: str | None
    access_count: int
    staleness: str
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "age_days": self.age_days,
            "last_accessed": self.last_accessed,
            "last_validated": self.last_validated,
            "access_count": self.access_count,
            "staleness": self.staleness,
        }


def assess(memory: Memory, now: datetime, config: StalenessConfig) -> Freshness:
    """Freshness metadata of one memory (Layer 6: every recall result carries it)."""
    base = base_score(memory, now, config.weights)
    score = base * (1.0 - access_credit(memory, now, config.weights))
    if memory.t_invalid is not None:
        level = SUPERSEDED
    else:
        level = level_for(base, config.thresholds(memory.namespace, memory.type.value))
    return Freshness(
        age_days=int(age_days(memory, now)),
        last_accessed=to_iso(memory.last_accessed) if memory.last_accessed else None,
        last_validated=to_iso(memory.last_validated) if memory.last_validated else None,
        access_count=memory.access_count,
        staleness=level,
        score=round(score, 3),
    )


def confirmed_recently(memory: Memory, now: datetime, config: StalenessConfig) -> bool:
    """Explicitly validated within its type's fresh window: the agent has reviewed it."""
    if memory.last_validated is None:
        return False
    thresholds = config.thresholds(memory.namespace, memory.type.value)
    return days_between(memory.last_validated, now) < thresholds.fresh


def confidence_decayed(memory: Memory, now: datetime, config: StalenessConfig) -> float | None:
    """The effective confidence of a fact stored above ``CONFIDENCE_REVIEW_BELOW`` whose
    confidence has decayed below it without validation; None otherwise (a fact stored at or
    below it has not *decayed* across it, and a low stored confidence is the agent's own call)."""
    if memory.type is not MemoryType.SEMANTIC or memory.confidence <= CONFIDENCE_REVIEW_BELOW:
        return None
    effective = effective_confidence(memory, now, config)
    return effective if effective < CONFIDENCE_REVIEW_BELOW else None


def review_reasons(
    memory: Memory, now: datetime, config: StalenessConfig, freshness: Freshness | None = None
) -> list[str]:
    """Why a current memory needs the agent's review (Layer 5); empty when it needs none.

    The one rule behind both ``reflect``'s ``needs_review`` list and ``stats``'
    ``needs_attention`` counts, so the two always agree. A memory confirmed within its type's
    fresh window needs no review, even when it is still stale by age (an old event stays old
    however often it is confirmed: validation resets the validation half of an episode's score,
    its age keeps counting at its own weight); listing it again would only loop.
    """
    if memory.t_invalid is not None or confirmed_recently(memory, now, config):
        return []
    fresh = freshness or assess(memory, now, config)
    reasons: list[str] = []
    if fresh.staleness == STALE:
        reasons.append(f"stale: effective age {fresh.score:.0f} days")
    elif fresh.staleness == AGING:
        reasons.append(f"aging: effective age {fresh.score:.0f} days")
    since = days_since_validation(memory, now)
    if needs_validation(memory, now, config):
        if memory.last_validated is None:
            reasons.append("never validated")
        else:
            reasons.append(f"last validated {since:.0f} days ago")
    decayed = confidence_decayed(memory, now, config)
    if decayed is not None:
        digits = 2 if f"{memory.confidence:.2f}" != f"{decayed:.2f}" else 3
        reasons.append(
            f"confidence decayed from {memory.confidence:.{digits}f} to {decayed:.{digits}f} "
            f"({since:.0f} days without validation)"
        )
    return reasons
