"""Deduplication on write (spec store step 2): same-type memories in the namespace with a dense
cosine above the threshold (default 0.95) are near-duplicates and the store is rejected.

Types never cross-deduplicate (the search is filtered by type); ``supersedes`` bypasses the check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ferrex.core.ports import IndexHit


@dataclass(frozen=True)
class Duplicate:
    memory_id: str
    similarity: float


def find_duplicate(hits: Sequence[IndexHit], threshold: float) -> Duplicate | None:
    """The most similar existing memory when its cosine is strictly above ``threshold``."""
    best: IndexHit | None = None
    for hit in hits:
        if (
            best is None
            or hit.score > best.score
            or (hit.score == best.score and hit.memory_id < best.memory_id)
        ):
            best = hit
    if best is None or best.score <= threshold:
        return None
    return Duplicate(best.memory_id, round(float(best.score), 4))
