"""Staleness safeguards (spec "Staleness Safeguards", Layers 2, 3 and 6).

The staleness score is an *effective age in days* that the per-type thresholds classify:
fresh < ``fresh``; stale >= ``stale``; aging in between.

    base = semantic:   days since last validation (spec: "since last validation")
           otherwise: (w_age * age + w_validated * days_since_validation) / (w_age + w_validated)
    credit = w_accessed * 2^(-days_since_access / 30) + w_access_count * min(1, ln(1+n) / ln(101))
    score = base * (1 - credit)

Age and validation carry the high weights (0.45 each); access recency and count the low ones
(0.05 each), so popularity slows staleness by at most 10% and can never keep an unvalidated
memory fresh forever (Layer 3: retrieval is not validation). Access only ever delays *stale*:
*fresh* needs the base alone (age and validation) under the fresh threshold, so one recall
never turns an aging memory fresh again. A memory never validated counts
its validation age from its own age (episodic, procedural) or from when it was stored (semantic).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ferrex.config import StalenessConfig, StalenessWeights, Thresholds
from ferrex.core.clock import days_between, to_iso
from ferrex.core.memory import Memory, MemoryType

FRESH = "fresh"
AGING = "aging"
STALE = "stale"
SUPERSEDED = "superseded"
ACCESS_HALF_LIFE_DAYS = 30.0
ACCESS_COUNT_SATURATION = 100


def age_days(memory: Memory, now: datetime) -> float:
    """Days since the memory's own time: the event (episodic) or the last write (others)."""
    if memory.type is MemoryType.EPISODIC:
        return days_between(memory.event_time, now)
    return days_between(memory.updated_at, now)


def days_since_validation(memory: Memory, now: datetime) -> float:
    if memory.last_validated is not None:
        return days_between(memory.last_validated, now)
    if memory.type is MemoryType.SEMANTIC:
        return days_between(memory.created_at, now)
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

    Never validated counts from the memory's own age (episodic, procedural) or from when it was
    stored (semantic), so a fresh memory never needs validation yet. Retrieval does not count
    (Layer 3): a popular memory still needs an explicit confirmation.
    """
    if memory.t_invalid is not None:
        return False
    thresholds = config.thresholds(memory.namespace, memory.type.value)
    return days_since_validation(memory, now) >= thresholds.fresh


def level_for(score: float, thresholds: Thresholds, base: float | None = None) -> str:
    """fresh / aging / stale of a score; ``base`` (the score without access credit) must also
    be under the fresh threshold for fresh: retrieval delays staleness, it never refreshes."""
    if score < thresholds.fresh and (base is None or base < thresholds.fresh):
        return FRESH
    if score >= thresholds.stale:
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
        level = level_for(score, config.thresholds(memory.namespace, memory.type.value), base)
    return Freshness(
        age_days=int(age_days(memory, now)),
        last_accessed=to_iso(memory.last_accessed) if memory.last_accessed else None,
        last_validated=to_iso(memory.last_validated) if memory.last_validated else None,
        access_count=memory.access_count,
        staleness=level,
        score=round(score, 3),
    )
