"""Staleness and review counts of a whole namespace without reading its memories.

A current memory's staleness level (fresh / aging / stale) and whether it needs the agent's
review (``staleness.review_reasons``) depend only on its type, namespace, confidence, creation
time and last validation, and both only grow as those times recede. The store keeps, on write,
the number of current memories per (type, confidence, hour of creation, hour of validation)
(``ReviewBucket``). For each bucket the rule is evaluated at its two extreme corners (the oldest
and the youngest instant of both hours): when they agree, every memory of the bucket agrees
(monotonicity); only a bucket that a threshold crosses right now (at most an hour of writes per
threshold) is read memory by memory. So stats costs O(buckets), not O(memories), and counts
exactly what ``reflect`` lists.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from ferrex.config.lifecycle import StalenessConfig
from ferrex.core.clock import from_iso
from ferrex.core.lifecycle.staleness import STALE, assess, review_reasons
from ferrex.core.memory import Memory, MemoryType
from ferrex.core.ports import LifecycleQueries, ReviewBucket

NEEDS_NOTHING = ""
NEEDS_STALE = "stale"
NEEDS_VALIDATION = "unvalidated"
_HOUR = timedelta(hours=1) - timedelta(microseconds=1)


@dataclass(frozen=True)
class AttentionCounts:
    """Current memories per staleness level, and those needing review split as stats says."""

    levels: Counter[str]
    stale: int  # needs review and is stale
    unvalidated: int  # needs review, not stale
    buckets: int  # buckets read from the counters
    memories_read: int  # memories read one by one (buckets a threshold crosses now)


def classify(memory: Memory, now: datetime, config: StalenessConfig) -> tuple[str, str]:
    """(staleness level, review need) of one current memory: the rule stats and reflect use."""
    freshness = assess(memory, now, config)
    if not review_reasons(memory, now, config, freshness):
        return freshness.staleness, NEEDS_NOTHING
    return freshness.staleness, NEEDS_STALE if freshness.staleness == STALE else NEEDS_VALIDATION


def _hour_start(hour: str) -> datetime:
    return from_iso(f"{hour}:00:00Z")


def _corner(namespace: str, bucket: ReviewBucket, *, youngest: bool) -> Memory:
    shift = _HOUR if youngest else timedelta(0)
    created = _hour_start(bucket.created_hour) + shift
    validated = (
        _hour_start(bucket.validated_hour) + shift if bucket.validated_hour is not None else None
    )
    return Memory(
        id="bucket-corner",
        namespace=namespace,
        type=MemoryType(bucket.type),
        created_at=created,
        updated_at=created,
        event_time=created,
        confidence=bucket.confidence,
        last_validated=validated,
    )


def count_attention(
    meta: LifecycleQueries, namespace: str, now: datetime, config: StalenessConfig
) -> AttentionCounts:
    totals: Counter[tuple[str, str]] = Counter()
    buckets = meta.review_buckets(namespace)
    read = 0
    for bucket in buckets:
        oldest = classify(_corner(namespace, bucket, youngest=False), now, config)
        youngest = classify(_corner(namespace, bucket, youngest=True), now, config)
        if oldest == youngest:
            totals[oldest] += bucket.n
            continue
        for memory in meta.memories_in_bucket(namespace, bucket):
            totals[classify(memory, now, config)] += 1
            read += 1
    levels: Counter[str] = Counter()
    needs: Counter[str] = Counter()
    for (level, need), n in totals.items():
        levels[level] += n
        needs[need] += n
    return AttentionCounts(
        levels=levels,
        stale=needs[NEEDS_STALE],
        unvalidated=needs[NEEDS_VALIDATION],
        buckets=len(buckets),
        memories_read=read,
    )
