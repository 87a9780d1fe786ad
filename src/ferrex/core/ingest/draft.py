"""Drafting a store request (spec, store step 1): secrets screened out, the memory type
resolved, the fields each type needs checked, the memory built and planned into chunks."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from ferrex.core import errors
from ferrex.core.deps import Deps
from ferrex.core.errors import FerrexError
from ferrex.core.ids import new_memory_id
from ferrex.core.index.chunking import Chunk, plan_chunks, step_prefix
from ferrex.core.ingest.procedures import (
    render_content,
)
from ferrex.core.memory import Memory, MemoryType, detect_type, embed_text
from ferrex.core.ports import (
    IndexHit,
    Vector,
)
from ferrex.core.requests import StoreRequest
from ferrex.core.secrets.fields import screen_store
from ferrex.core.secrets.scanner import Redaction, SecretScanner


@dataclass
class Prepared:
    """A validated store request with its memory built and its vectors computed."""

    request: StoreRequest
    memory: Memory
    chunks: list[Chunk]
    vectors: list[Vector]
    entity_names: list[str]
    subject_name: str | None = None
    # Name embeddings computed with the document's batch (before the write transaction), for
    # the names no exact or fuzzy match resolves: no model runs inside a transaction.
    name_vectors: dict[str, Vector] = field(default_factory=dict)
    # Per chunk: late-interaction token vectors (empty: the index has no such channel).
    tokens: list[np.ndarray | None] = field(default_factory=list)
    # The index's nearest same-type memories (``DuplicateCheck.scope``), searched for a whole
    # bulk batch in one engine call before its transaction (the index does not change until
    # the batch is committed); None: searched when checked.
    nearest: list[IndexHit] | None = None
    # Secrets taken out of the request before any rule saw it (core/secrets/).
    redactions: list[Redaction] = field(default_factory=list)


class Drafting:
    """Builds a store request's memory (no store or index is read: a batch drafts, then embeds
    in one model call)."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps
        self.settings = deps.settings
        self.embedder = deps.embedder
        secrets = self.settings.secrets
        self.scanner = SecretScanner(secrets.patterns, secrets.allow)

    def draft(self, request: StoreRequest, now: datetime) -> Prepared:
        # Secrets first: dedup, conflicts, entities and the model see the redacted text only.
        request, redactions = screen_store(request, self.scanner, self.settings.secret_handling)
        namespace = request.namespace or self.deps.namespace
        triple = [request.subject, request.predicate, request.object]
        memory_type = detect_type(
            request.type,
            has_triple_field=any(v is not None for v in triple),
            has_full_triple=all(v is not None for v in triple),
            has_procedure_fields=bool(
                request.steps
                or request.conditions
                or (request.name and request.type)
                or request.rollback_to is not None
            ),
        )
        require_fields(request, memory_type)
        event_time = request.timestamp or now
        memory = Memory(
            id=new_memory_id(now),
            namespace=namespace,
            type=memory_type,
            created_at=now,
            updated_at=now,
            event_time=event_time,
            confidence=request.confidence,
            source=request.source,
            context=request.context,
            pinned=request.pinned,
            multi_valued=request.multi_valued,
            last_validated=None,
        )
        subject_name = None
        if memory_type is MemoryType.SEMANTIC:
            fill_fact(memory, request, now)
            subject_name = request.subject
        elif memory_type is MemoryType.PROCEDURAL:
            memory.name = request.name
            memory.conditions = list(request.conditions or [])
            memory.steps = list(request.steps or [])
            memory.content = request.content or render_content(
                request.name, memory.conditions, memory.steps
            )
            memory.t_valid = event_time
        else:
            memory.content = request.content
            memory.t_valid = event_time
        info = self.embedder.info
        chunks = plan_chunks(
            memory_type,
            embed_text(memory),
            steps=memory.steps,
            count_tokens=self.embedder.count_tokens,
            max_tokens=info.max_tokens,
            step_prefix=step_prefix(memory),
        )
        memory.chunk_count = len(chunks)
        memory.embed_model = info.pin
        names = list(dict.fromkeys(n.strip() for n in (request.entities or []) if n.strip()))
        if subject_name and subject_name.strip():
            # The subject resolves first: _apply_one takes resolutions[0] as the fact's subject.
            names = [subject_name.strip(), *(n for n in names if n != subject_name.strip())]
        return Prepared(request, memory, chunks, [], names, subject_name, redactions=redactions)


def require_fields(request: StoreRequest, memory_type: MemoryType) -> None:
    if memory_type is MemoryType.SEMANTIC:
        missing = [n for n in ("subject", "predicate", "object") if getattr(request, n) is None]
        if missing:
            raise FerrexError(
                errors.MISSING_FIELD,
                f"store: a semantic memory needs subject, predicate and object (missing: "
                f"{', '.join(missing)})",
                field=missing[0],
            )
    elif memory_type is MemoryType.PROCEDURAL:
        if request.content is None and not request.steps and request.rollback_to is None:
            raise FerrexError(
                errors.MISSING_FIELD,
                "store: a procedural memory needs 'content' or 'steps' (and ideally a 'name')",
                field="content",
            )
        if request.rollback_to is not None and not request.name:
            raise FerrexError(
                errors.MISSING_FIELD,
                "store: rollback_to needs the procedure 'name'",
                field="name",
            )
        given = [n for n in ("content", "steps", "conditions") if getattr(request, n) is not None]
        if request.rollback_to is not None and given:
            raise FerrexError(
                errors.INVALID_PARAMS,
                f"store: rollback_to restores version {request.rollback_to} as it was, so "
                f"'{given[0]}' cannot be given with it: either roll back (name + rollback_to) "
                "or store a new version (name + steps). Nothing was stored.",
                field=given[0],
            )
    elif request.content is None:
        given = [n for n in ("subject", "predicate", "object") if getattr(request, n)]
        if given and request.type is None:  # a fact with a part missing, not an episode
            missing = [n for n in ("subject", "predicate", "object") if n not in given]
            raise FerrexError(
                errors.MISSING_FIELD,
                f"store: a semantic fact needs subject, predicate and object (missing: "
                f"{', '.join(missing)})",
                field=missing[0],
            )
        raise FerrexError(
            errors.MISSING_FIELD,
            "store: an episodic memory needs 'content' (or give subject, predicate and object "
            "for a semantic fact, or steps for a procedure)",
            field="content",
        )
    if request.rollback_to is not None and memory_type is not MemoryType.PROCEDURAL:
        raise FerrexError(
            errors.INVALID_PARAMS,
            "store: rollback_to applies to procedural memories only (give type "
            "'procedural' and the procedure's name)",
            field="rollback_to",
        )


_FIELDS_OF_OTHER_TYPES: dict[MemoryType, tuple[str, ...]] = {
    MemoryType.EPISODIC: (
        "subject",
        "predicate",
        "object",
        "t_valid",
        "t_invalid",
        "multi_valued",
        "name",
        "conditions",
        "steps",
        "version",
    ),
    MemoryType.SEMANTIC: ("content", "name", "conditions", "steps", "version"),
    MemoryType.PROCEDURAL: (
        "subject",
        "predicate",
        "object",
        "t_valid",
        "t_invalid",
        "multi_valued",
    ),
}
UNUSED_HINT: dict[MemoryType, str] = {
    MemoryType.EPISODIC: "a fact needs subject, predicate and object; a procedure needs "
    "type 'procedural' or steps",
    MemoryType.SEMANTIC: "a fact is its subject, predicate and object; store the rest as an "
    "episodic memory",
    MemoryType.PROCEDURAL: "store the fact as a semantic memory of its own",
}


def unused_fields(request: StoreRequest, memory_type: MemoryType) -> list[str]:
    """Fields the caller gave that a memory of ``memory_type`` has no place for (the store
    says so rather than dropping them silently)."""
    out: list[str] = []
    for name in _FIELDS_OF_OTHER_TYPES[memory_type]:
        value = getattr(request, name)
        if value is None or value is False or value == []:
            continue
        out.append(name)
    return out


def fill_fact(memory: Memory, request: StoreRequest, now: datetime) -> None:
    """A fact's triple and validity; a history fact (``t_invalid``) checked against them."""
    memory.subject = request.subject
    memory.predicate = request.predicate
    memory.object = request.object
    memory.t_valid = request.t_valid or request.timestamp or now
    memory.event_time = memory.t_valid
    if request.t_invalid is None:
        return
    if request.supersedes is not None:
        raise FerrexError(
            errors.INVALID_PARAMS,
            "store: a fact given with t_invalid is history and cannot supersede "
            "another memory; drop one of the two",
            field="t_invalid",
        )
    if request.t_invalid > now:
        raise FerrexError(
            errors.INVALID_PARAMS,
            "store: t_invalid is in the future, so the fact is still true now: "
            "store it without t_invalid (it is current) and supersede it when it "
            "ends",
            field="t_invalid",
        )
    if dated(request) and request.t_invalid <= memory.t_valid:
        raise ends_before_start()


def dated(request: StoreRequest) -> bool:
    """Whether the caller said when the fact became true (t_valid, or timestamp)."""
    return request.t_valid is not None or request.timestamp is not None


def ends_before_start() -> FerrexError:
    return FerrexError(
        errors.INVALID_PARAMS,
        "store: t_invalid must be after t_valid (when the fact became true). Without t_valid, "
        "t_invalid ends the stored fact with this value; no such fact began before t_invalid, "
        "so give t_valid to store a fact that ended in the past. Nothing was stored.",
        field="t_invalid",
    )
