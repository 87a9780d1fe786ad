"""Deduplication on write (spec store step 2): same-type memories in the namespace with a dense
cosine above the threshold (default 0.95) are near-duplicates and the store is rejected.

Types never cross-deduplicate (the search is filtered by type); ``supersedes`` bypasses the check.
Two texts whose distinguishing tokens differ (``core/matching/distinguishing.py``: "build 1.4.2" /
"build 1.4.3", "#4812" / "#4813", "42 minutes" / "97 minutes", "passed" / "failed") are two
memories whatever their cosine: the cosine of such a pair is often 0.97-0.99.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

import numpy as np

from ferrex.core import errors
from ferrex.core.deps import Deps
from ferrex.core.errors import FerrexError
from ferrex.core.ingest.draft import Prepared
from ferrex.core.matching.distinguishing import differ
from ferrex.core.memory import Memory, MemoryType, embed_text
from ferrex.core.ports import IndexFilter, IndexHit, Vector


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


@dataclass(frozen=True)
class DedupScope:
    """Which memories a new one can duplicate: its namespace and type; a fact, only its
    subject's facts; a dated episode, only the episodes of its UTC day."""

    namespace: str
    type: MemoryType
    # Facts about two subjects are two facts however alike their text ("frontend" and
    # "backend" use the same test runner): a fact is compared with its subject's facts only.
    subject: int | None
    # A recurring event ("nightly backup completed") that the agent dates on another day is
    # another event, not a duplicate: compare only with the episodes of that UTC day. Without
    # a timestamp it is a re-store of something known, whatever its day.
    day: date | None

    @classmethod
    def of(cls, item: Prepared) -> DedupScope:
        memory = item.memory
        dated = memory.type is MemoryType.EPISODIC and item.request.timestamp is not None
        return cls(
            memory.namespace,
            memory.type,
            memory.subject_entity_id if memory.type is MemoryType.SEMANTIC else None,
            memory.event_time.astimezone(UTC).date() if dated else None,
        )

    def admits(self, other: Memory) -> bool:
        """Whether ``other`` (a memory of the same batch) is inside this scope."""
        return (
            other.namespace == self.namespace
            and other.type is self.type
            and (self.subject is None or other.subject_entity_id == self.subject)
            and (self.day is None or other.event_time.astimezone(UTC).date() == self.day)
        )


class DuplicateCheck:
    """Where a new memory's duplicate is looked for (its scope: namespace, type, the fact's
    subject, the dated episode's day) and how close it must be (``dedup.threshold``)."""

    def __init__(self, deps: Deps) -> None:
        self.settings = deps.settings
        self.meta = deps.meta
        self.index = deps.index
        self.embedder = deps.embedder

    def reject(
        self,
        item: Prepared,
        batch_vectors: Sequence[tuple[Prepared, Vector]],
        exclude: frozenset[str] = frozenset(),
        found: Duplicate | None = None,
    ) -> None:
        """Reject a near-duplicate of a same-type memory of the namespace (``exclude``: ids that
        may legitimately be close, e.g. the earlier versions of the procedure being updated)."""
        duplicate = found or self.find(item, batch_vectors, exclude)
        if duplicate is not None:
            raise FerrexError(
                errors.DUPLICATE,
                f"similar memory already exists: {duplicate.memory_id} (cosine "
                f"{duplicate.similarity:.3f}). Nothing was stored; to replace it, store again with "
                f'supersedes="{duplicate.memory_id}".',
                existing_id=duplicate.memory_id,
                similarity=duplicate.similarity,
            )

    def scope(self, item: Prepared, excluded: int = 0) -> tuple[IndexFilter, int]:
        """The filter and depth of an item's duplicate search."""
        memory, where = item.memory, DedupScope.of(item)
        day_start = (
            datetime.combine(where.day, time.min, tzinfo=UTC) if where.day is not None else None
        )
        flt = IndexFilter(
            namespace=memory.namespace,
            types=(memory.type.value,),
            model=self.embedder.info.pin,
            entity_ids=(where.subject,) if where.subject is not None else None,
            time_after=day_start,
            time_before=day_start + timedelta(days=1, microseconds=-1) if day_start else None,
        )
        # 8 nearest: the closest may differ in a distinguishing token (find_duplicate) while a
        # true duplicate is a little further.
        return flt, 8 + excluded

    def search_nearest(self, prepared: Sequence[Prepared]) -> None:
        """Every episode's duplicate search of a bulk batch in one engine call (``nearest``).
        Facts (their subject is resolved in the transaction) and procedures (their earlier
        versions are excluded) are searched when checked."""
        episodes = [
            item
            for item in prepared
            if item.memory.type is MemoryType.EPISODIC and item.request.supersedes is None
        ]
        if len(episodes) < 2:
            return
        found = self.index.dense_search_many(
            [(item.vectors[0], *self.scope(item)) for item in episodes],
            self.settings.retrieval.hnsw_ef,
        )
        for item, hits in zip(episodes, found, strict=True):
            item.nearest = hits

    def find(
        self,
        item: Prepared,
        batch_vectors: Sequence[tuple[Prepared, Vector]],
        exclude: frozenset[str] = frozenset(),
    ) -> Duplicate | None:
        memory = item.memory
        vector = item.vectors[0]
        where = DedupScope.of(item)
        subject = where.subject
        if item.nearest is not None and not exclude:
            nearest = item.nearest
        else:
            nearest = self.index.dense_search(
                vector, *self.scope(item, len(exclude)), self.settings.retrieval.hnsw_ef
            )
        # Only a hit above the threshold can be the duplicate: the others' rows are not read.
        threshold = self.settings.dedup.threshold
        hits = [hit for hit in nearest if hit.memory_id not in exclude and hit.score > threshold]
        rows = self.meta.get_memories([hit.memory_id for hit in hits]) if hits else {}
        if subject is not None and hits:
            hits = [
                hit
                for hit in hits
                if hit.memory_id in rows and rows[hit.memory_id].subject_entity_id == subject
            ]
        texts = {memory_id: embed_text(row) for memory_id, row in rows.items()}
        for other, other_vector in batch_vectors:
            if other.memory.id not in exclude and where.admits(other.memory):
                score = float(np.dot(vector, other_vector))
                if score > threshold:
                    hits.append(IndexHit(point_id="", memory_id=other.memory.id, score=score))
                    texts[other.memory.id] = embed_text(other.memory)
        return find_duplicate(hits, threshold, text=embed_text(memory), texts=texts)
