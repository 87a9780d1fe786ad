"""The dual write between SQLite (truth) and the vector index (derived), and its recovery.

Every change commits its SQLite rows and an outbox row (``journal``) in one transaction, then
applies the vector-index change, then marks the outbox row done. At start-up, unfinished rows
are rolled forward from SQLite: a memory that exists is (re)indexed from its stored content (the
embedding is deterministic), one that does not is removed from the index. Replaying is
idempotent, so a crash at any instant loses no acknowledged write and leaves no orphan.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import structlog

from ferrex.config.core import CoreSettings
from ferrex.core.errors import FerrexError
from ferrex.core.ids import point_id
from ferrex.core.index.chunking import Chunk, plan_chunks, step_prefix
from ferrex.core.index.late_interaction import document_tokens
from ferrex.core.index.points import build_payload, sparse_text, validity_payload
from ferrex.core.memory import Memory, embed_text
from ferrex.core.ports import (
    Embedder,
    IndexPoint,
    JournalEntry,
    MetadataStore,
    SparseEncoder,
    Vector,
    VectorIndex,
)

log = structlog.get_logger("ferrex.sync")

ProgressFn = Callable[[int, int], None]

# Phases of the dual write where a test hook may pause the process (crash-safety tests).
PHASE_BEFORE_COMMIT = "before_sqlite_commit"
PHASE_AFTER_COMMIT = "after_sqlite_commit"
PHASE_AFTER_INDEX = "after_index_write"
# The engine has applied a write a peer forwarded and not yet answered it (runtime/shared.py).
PHASE_BEFORE_ANSWER = "before_answer"


def checkpoint(phase: str) -> None:
    """Test hook: with FERREX_TEST_PAUSE_AT=<phase>, announce the phase and wait to be killed.

    Tests only (docs/modes.md): production never sets the variable, and then this returns at
    once. ``FERREX_TEST_PAUSE_FILE`` names the file the phase is written to when reached."""
    target = os.environ.get("FERREX_TEST_PAUSE_AT")
    if target != phase:
        return
    marker = os.environ.get("FERREX_TEST_PAUSE_FILE")
    if marker:
        with open(marker, "w", encoding="utf-8") as handle:
            handle.write(phase)
    while True:  # pragma: no cover - the test kills the process here
        time.sleep(3600)


@dataclass
class PlannedMemory:
    memory: Memory
    chunks: list[Chunk]
    vectors: list[Vector]
    # Per chunk: the late-interaction token vectors (empty or None: the point has none).
    tokens: list[np.ndarray | None] = field(default_factory=list)


class IndexSync:
    """Builds index points for memories and keeps the index in step with SQLite."""

    def __init__(
        self,
        settings: CoreSettings,
        meta: MetadataStore,
        index: VectorIndex,
        embedder: Embedder,
        sparse: SparseEncoder,
    ) -> None:
        self.settings = settings
        self.meta = meta
        self.index = index
        self.embedder = embedder
        self.sparse = sparse

    # ------------------------------------------------------------------ embedding

    @property
    def late_indexing(self) -> bool:
        """Whether points get token vectors: whenever the collection has the channel (created
        with ``retrieval.late_interaction.enabled``; an older one gets it with ``ferrex
        rebuild-index``), whatever the setting says now, so that no point of it lacks them."""
        return self.index.late_interaction

    def embed(
        self, texts: Sequence[str], documents: int | None = None
    ) -> tuple[list[Vector], list[np.ndarray | None]]:
        """Document vectors and, where the index has the channel, the pooled token vectors of
        the first ``documents`` texts (all by default; the rest, entity names embedded in the
        same batch, need none). The same model pass: one model call either way."""
        if not texts:
            return [], []
        if not self.late_indexing:
            return self.embedder.embed_documents(texts), [None] * len(texts)
        count = self.settings.retrieval.late_interaction.tokens
        pooled = len(texts) if documents is None else documents
        embedded = self.embedder.embed_documents_tokens(texts)
        return [e.dense for e in embedded], [
            document_tokens(e, count) if n < pooled else None for n, e in enumerate(embedded)
        ]

    # ------------------------------------------------------------------ planning

    def chunks_for(self, memory: Memory) -> list[Chunk]:
        info = self.embedder.info
        try:
            return plan_chunks(
                memory.type,
                embed_text(memory),
                steps=memory.steps,
                count_tokens=self.embedder.count_tokens,
                max_tokens=info.max_tokens,
                step_prefix=step_prefix(memory),
            )
        except FerrexError:
            # Only reachable when re-indexing with a model of smaller context than the one the
            # memory was accepted with: keep the memory, embed it whole (the model truncates).
            return [Chunk(0, embed_text(memory))]

    def plan(self, memories: Sequence[Memory]) -> list[PlannedMemory]:
        """Chunk and embed memories in one batch."""
        chunked = [(m, self.chunks_for(m)) for m in memories]
        texts = [c.text for _, chunks in chunked for c in chunks]
        vectors, tokens = self.embed(texts)
        planned, cursor = [], 0
        for memory, chunks in chunked:
            end = cursor + len(chunks)
            planned.append(PlannedMemory(memory, chunks, vectors[cursor:end], tokens[cursor:end]))
            cursor = end
        return planned

    def points(self, planned: PlannedMemory) -> list[IndexPoint]:
        pin = self.embedder.info.pin
        return [
            IndexPoint(
                point_id=point_id(planned.memory.id, chunk.index),
                dense=vector,
                sparse=self.sparse.encode_document(sparse_text(planned.memory, chunk.text)),
                payload=build_payload(
                    planned.memory, chunk.index, pin, per_step=len(planned.chunks) > 1
                ),
                tokens=planned.tokens[position] if position < len(planned.tokens) else None,
            )
            for position, (chunk, vector) in enumerate(
                zip(planned.chunks, planned.vectors, strict=True)
            )
        ]

    # ------------------------------------------------------------------ applying

    def write_points(self, planned: Sequence[PlannedMemory], *, replace: bool = False) -> None:
        if replace:
            self.index.delete_memories([p.memory.id for p in planned])
        points = [point for p in planned for point in self.points(p)]
        self.index.upsert(points)
        self._record_layout(planned)

    def _record_layout(self, planned: Sequence[PlannedMemory]) -> None:
        """Keep SQLite's ``chunk_count`` / ``embed_model`` equal to what was just indexed.

        Re-indexing with another model (rebuild-index, import, repair) can split a memory
        differently (a 256-token model splits a procedure a 512-token model embeds whole);
        doctor counts the points SQLite says a memory has, so SQLite must follow.
        """
        pin = self.embedder.info.pin
        changed = [
            p
            for p in planned
            if p.memory.chunk_count != len(p.chunks) or p.memory.embed_model != pin
        ]
        if not changed:
            return
        with self.meta.transaction():
            for p in changed:
                self.meta.update_memory_fields(
                    p.memory.id, chunk_count=len(p.chunks), embed_model=pin
                )
                p.memory.chunk_count, p.memory.embed_model = len(p.chunks), pin

    def write_payloads(self, memories: Iterable[Memory]) -> None:
        for memory in memories:
            self.index.set_payload(memory.id, validity_payload(memory))

    def delete(self, memory_ids: Sequence[str]) -> None:
        self.index.delete_memories(memory_ids)

    # ------------------------------------------------------------------ recovery

    def replay(self, entries: Sequence[JournalEntry]) -> int:
        """Roll pending outbox rows forward from SQLite; returns how many memories were synced."""
        if not entries:
            return 0
        ops: dict[str, set[str]] = {}
        for entry in entries:
            ops.setdefault(entry.memory_id, set()).add(entry.op)
        rows = self.meta.get_memories(list(ops))
        to_index = [rows[mid] for mid, kinds in ops.items() if mid in rows and "index" in kinds]
        to_payload = [
            rows[mid] for mid, kinds in ops.items() if mid in rows and "index" not in kinds
        ]
        to_delete = [mid for mid in ops if mid not in rows]
        for start in range(0, len(to_index), 128):
            self.write_points(self.plan(to_index[start : start + 128]), replace=True)
        self.write_payloads(to_payload)
        self.delete(to_delete)
        self.meta.journal_done([e.seq for e in entries])
        return len(ops)

    def recover(self) -> int:
        pending = self.meta.journal_pending()
        if pending:
            log.warning("replaying unfinished writes from the journal", entries=len(pending))
        return self.replay(pending)

    def reembed_entities(self) -> int:
        """Recompute every entity-name embedding with the current model (after a model change)."""
        rows = self.meta.entities_of_namespace(None)
        for start in range(0, len(rows), 256):
            batch = rows[start : start + 256]
            vectors = self.embedder.embed_documents([r["display_name"] for r in batch])
            with self.meta.transaction():
                for row, vector in zip(batch, vectors, strict=True):
                    self.meta.set_entity_embedding(int(row["id"]), vector)
        return len(rows)

    def rebuild(self, progress: ProgressFn | None = None, batch: int = 128) -> int:
        """Recreate the whole vector index from SQLite."""
        total = self.meta.count_memories()
        self.index.reset(
            self.embedder.info.dimension,
            late_interaction=self.settings.retrieval.late_interaction.enabled,
        )
        done = 0
        buffer: list[Memory] = []
        for memory in self.meta.iter_memories():
            buffer.append(memory)
            if len(buffer) >= batch:
                self.write_points(self.plan(buffer))
                done += len(buffer)
                buffer = []
                if progress:
                    progress(done, total)
        if buffer:
            self.write_points(self.plan(buffer))
            done += len(buffer)
        if progress:
            progress(done, total)
        self.meta.journal_done([e.seq for e in self.meta.journal_pending()])
        return done
