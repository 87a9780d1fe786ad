"""Memory types, the Memory record, type auto-detection and the text each type embeds."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class MemoryType(StrEnum):
    EPISODIC = "episodic"
    SEMANTIC = "semantic"
    PROCEDURAL = "procedural"


MEMORY_TYPES: tuple[str, ...] = tuple(t.value for t in MemoryType)


# A memory's text fields: what the secret scanner reads and a redaction rewrites, and what the
# storage budget counts (the SQLite adapter's text columns carry these names).
TEXT_FIELDS = (
    "content",
    "subject",
    "predicate",
    "object",
    "name",
    "conditions",
    "steps",
    "context",
    "source",
)


@dataclass
class Memory:
    """One stored memory, as held in SQLite (the source of truth)."""

    id: str
    namespace: str
    type: MemoryType
    created_at: datetime
    updated_at: datetime
    event_time: datetime
    content: str | None = None
    subject: str | None = None
    predicate: str | None = None
    predicate_canonical: str | None = None
    object: str | None = None
    subject_entity_id: int | None = None
    name: str | None = None
    conditions: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    version: int | None = None
    confidence: float = 1.0
    source: str | None = None
    context: dict[str, Any] | None = None
    entities: list[str] = field(default_factory=list)
    entity_ids: list[int] = field(default_factory=list)
    t_valid: datetime | None = None
    t_invalid: datetime | None = None
    superseded_by: str | None = None
    last_accessed: datetime | None = None
    last_validated: datetime | None = None
    access_count: int = 0
    pinned: bool = False
    multi_valued: bool = False
    chunk_count: int = 1
    embed_model: str | None = None

    @property
    def is_current(self) -> bool:
        return self.t_invalid is None

    def display_text(self) -> str:
        """What the agent reads for this memory (also what token budgets count)."""
        if self.type is MemoryType.SEMANTIC:
            return f"{self.subject} {self.predicate} {self.object}"
        return self.content or ""

    def summary(self, max_chars: int = 80) -> str:
        text = " ".join(self.display_text().split())
        if self.type is MemoryType.PROCEDURAL and self.name:
            text = self.name
        if len(text) <= max_chars:
            return text
        cut = text[: max_chars - 1].rsplit(" ", 1)[0]
        return f"{cut}…"


def detect_type(
    explicit: str | None,
    *,
    has_triple_field: bool,
    has_full_triple: bool,
    has_procedure_fields: bool,
) -> MemoryType:
    """Type resolution (spec, store step 1).

    Explicit type wins; otherwise semantic when subject+predicate+object are given, procedural
    when steps or conditions are given, else episodic. ``has_triple_field`` is accepted for
    callers that want to warn about a partial triple; it does not change the outcome.
    """
    del has_triple_field
    if explicit is not None:
        return MemoryType(explicit)
    if has_full_triple:
        return MemoryType.SEMANTIC
    if has_procedure_fields:
        return MemoryType.PROCEDURAL
    return MemoryType.EPISODIC


def semantic_embed_text(subject: str, predicate: str, obj: str) -> str:
    """Spec: semantic memories embed "{subject} {predicate} {object}" as a natural sentence."""
    readable_predicate = predicate.replace("_", " ").replace("-", " ")
    return " ".join(f"{subject} {readable_predicate} {obj}".split())


def embed_text(memory: Memory) -> str:
    """The plain text one memory embeds (no metadata prefixes, per the spec)."""
    if memory.type is MemoryType.SEMANTIC:
        return semantic_embed_text(
            memory.subject or "", memory.predicate or "", memory.object or ""
        )
    return memory.content or ""
