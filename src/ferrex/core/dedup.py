"""Deduplication on write (spec store step 2): same-type memories in the namespace with a dense
cosine above the threshold (default 0.95) are near-duplicates and the store is rejected.

Types never cross-deduplicate (the search is filtered by type); ``supersedes`` bypasses the check.
Two texts whose distinguishing tokens differ (``core/distinguishing.py``: "build 1.4.2" /
"build 1.4.3", "#4812" / "#4813", "42 minutes" / "97 minutes", "passed" / "failed") are two
memories whatever their cosine: the cosine of such a pair is often 0.97-0.99.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ferrex.core.distinguishing import differ
from ferrex.core.ports import IndexHit


@dataclass(frozen=True)
class Duplicate:
    memory_id: str
    similarity: float


def find_duplicate(
    hits: Sequence[IndexHit],
    threshold: float,
    *,
    text: str | None = None,
    texts: Mapping[str, str] | None = None,
) -> Duplicate | None:
    """The most similar existing memory when its cosine is strictly above ``threshold``.

    With ``text`` (the incoming memory's) and ``texts`` (the hits' texts by memory id), a hit
    whose distinguishing tokens differ from the incoming text's is never a duplicate."""
    best: IndexHit | None = None
    for hit in hits:
        if hit.score <= threshold:
            continue  # never the answer: no need to read its tokens
        other = texts.get(hit.memory_id) if texts is not None else None
        if text is not None and other is not None and differ(text, other):
            continue
        if (
            best is None
            or hit.score > best.score
            or (hit.score == best.score and hit.memory_id < best.memory_id)
        ):
            best = hit
    if best is None:
        return None
    return Duplicate(best.memory_id, round(float(best.score), 4))
