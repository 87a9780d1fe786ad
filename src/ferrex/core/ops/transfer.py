"""Export and import: every memory with all its metadata, its entities (with aliases) and the
audit log as JSON lines (``export_format``), and back."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import structlog

from ferrex import __version__
from ferrex.core.clock import from_iso, to_iso
from ferrex.core.errors import FerrexError
from ferrex.core.index.pins import (
    PIN_DIMENSION,
    PIN_NAME,
    PIN_VARIANT,
)
from ferrex.core.index.sync import PlannedMemory, ProgressFn
from ferrex.core.memory import Memory, MemoryType
from ferrex.core.ops.export_format import EXPORT_FORMAT, EXPORT_VERSION, check_records
from ferrex.core.secrets.sweep import ImportScreen
from ferrex.core.service import MemoryService

log = structlog.get_logger("ferrex.ops")


def export_lines(service: MemoryService, namespace: str | None = None) -> Iterator[dict[str, Any]]:
    """Every memory with all metadata, its entities (with aliases) and the audit log."""
    service.access.flush()
    meta = service.meta
    yield {
        "kind": "header",
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "ferrex": __version__,
        "exported_at": to_iso(service.now()),
        "namespace": namespace,
        "model": {
            "name": meta.get_meta(PIN_NAME),
            "dimension": int(meta.get_meta(PIN_DIMENSION) or 0) or None,
            "variant": meta.get_meta(PIN_VARIANT),
        },
    }
    entities = meta.entities_of_namespace(namespace)
    aliases = meta.aliases_of([e["id"] for e in entities])
    candidates: dict[int, list[dict[str, Any]]] = {}
    for row in meta.candidates_of_namespace(namespace):
        candidates.setdefault(int(row["entity_id"]), []).append(
            {"name": row["name"], "score": row["score"], "created_at": row["created_at"]}
        )
    for entity in entities:
        yield {
            "kind": "entity",
            "id": entity["id"],
            "namespace": entity["namespace"],
            "name": entity["name"],
            "display_name": entity["display_name"],
            "entity_type": entity["entity_type"],
            "created_at": entity["created_at"],
            "updated_at": entity["updated_at"],
            "aliases": aliases.get(entity["id"], []),
            "alias_candidates": candidates.get(entity["id"], []),
        }
    for memory in meta.iter_memories(namespace):
        yield memory_to_record(memory)
    for entry in reversed(meta.audit_entries(namespace, limit=10_000_000)):
        yield {"kind": "audit", **{k: v for k, v in entry.items() if k != "seq"}}


def memory_to_record(memory: Memory) -> dict[str, Any]:
    def ts(value: Any) -> str | None:
        return None if value is None else to_iso(value)

    return {
        "kind": "memory",
        "id": memory.id,
        "namespace": memory.namespace,
        "type": memory.type.value,
        "content": memory.content,
        "subject": memory.subject,
        "predicate": memory.predicate,
        "predicate_canonical": memory.predicate_canonical,
        "object": memory.object,
        "subject_entity_id": memory.subject_entity_id,
        "name": memory.name,
        "conditions": memory.conditions,
        "steps": memory.steps,
        "version": memory.version,
        "confidence": memory.confidence,
        "source": memory.source,
        "context": memory.context,
        "entity_ids": memory.entity_ids,
        "entities": memory.entities,
        "created_at": ts(memory.created_at),
        "updated_at": ts(memory.updated_at),
        "event_time": ts(memory.event_time),
        "t_valid": ts(memory.t_valid),
        "t_invalid": ts(memory.t_invalid),
        "superseded_by": memory.superseded_by,
        "last_accessed": ts(memory.last_accessed),
        "last_validated": ts(memory.last_validated),
        "access_count": memory.access_count,
        "pinned": memory.pinned,
        "multi_valued": memory.multi_valued,
        "chunk_count": memory.chunk_count,
        "embed_model": memory.embed_model,
    }


def record_to_memory(record: dict[str, Any], entity_map: dict[int, int]) -> Memory:
    def dt(value: Any) -> Any:
        return None if value is None else from_iso(value)

    subject = record.get("subject_entity_id")
    return Memory(
        id=record["id"],
        namespace=record["namespace"],
        type=MemoryType(record["type"]),
        content=record.get("content"),
        subject=record.get("subject"),
        predicate=record.get("predicate"),
        predicate_canonical=record.get("predicate_canonical"),
        object=record.get("object"),
        subject_entity_id=entity_map.get(subject, subject) if subject is not None else None,
        name=record.get("name"),
        conditions=list(record.get("conditions") or []),
        steps=list(record.get("steps") or []),
        version=record.get("version"),
        confidence=float(record.get("confidence", 1.0)),
        source=record.get("source"),
        context=record.get("context"),
        entity_ids=[entity_map.get(e, e) for e in record.get("entity_ids") or []],
        created_at=from_iso(record["created_at"]),
        updated_at=from_iso(record["updated_at"]),
        event_time=from_iso(record["event_time"]),
        t_valid=dt(record.get("t_valid")),
        t_invalid=dt(record.get("t_invalid")),
        superseded_by=record.get("superseded_by"),
        last_accessed=dt(record.get("last_accessed")),
        last_validated=dt(record.get("last_validated")),
        access_count=int(record.get("access_count", 0)),
        pinned=bool(record.get("pinned", False)),
        multi_valued=bool(record.get("multi_valued", False)),
        chunk_count=int(record.get("chunk_count", 1)),
        embed_model=record.get("embed_model"),
    )


# =========================================================================== import


def import_records(
    service: MemoryService,
    records: Iterable[dict[str, Any]],
    progress: ProgressFn | None = None,
    batch: int = 256,
) -> dict[str, Any]:
    """Restore an export into this store (ids kept; existing ids reported as duplicates).

    Every line is validated first (``core/ops/export_format.py``): a bad file imports nothing."""
    records = list(records)
    check_records(records)
    screen = ImportScreen(service)
    screen.refuse_if_any(records)
    service.ensure_ready()
    meta = service.meta
    now = service.now()
    entity_map: dict[int, int] = {}
    imported: list[str] = []
    duplicates: list[str] = []
    audit_rows = 0
    audit_duplicates = 0
    present_audit = Counter(_audit_row(entry) for entry in meta.audit_entries(None, limit=10**9))
    pending: list[Memory] = []
    seen_ids: set[str] = set()
    seen_header = False
    total = 0

    def flush() -> None:
        nonlocal pending
        if not pending:
            return
        with service.deps.write:
            journal: list[int] = []
            with meta.transaction():
                for memory in pending:
                    meta.insert_memory(memory)
                    meta.link_entities(memory.id, memory.entity_ids)
                    journal.append(meta.journal_add("index", memory.id, memory.namespace, now))
            planned: list[PlannedMemory] = service.sync.plan(pending)
            service.sync.write_points(planned)
            meta.journal_done(journal)
        imported.extend(m.id for m in pending)
        pending = []
        if progress:
            progress(len(imported), total)

    try:
        for record in records:
            kind = record.get("kind")
            if kind == "header":
                seen_header = _check_header(record)
                continue
            if not seen_header:
                raise FerrexError(
                    "invalid_params", "not a ferrex export file: the header line is missing"
                )
            if kind == "entity":
                entity_map[int(record["id"])] = _import_entity(service, record, now)
            elif kind == "memory":
                total += 1
                # Already in the store, or earlier in this file (e.g. two overlapping exports
                # concatenated): reported as a duplicate, the first copy wins.
                if record["id"] in seen_ids or meta.memory_exists(record["id"]):
                    duplicates.append(record["id"])
                    continue
                seen_ids.add(record["id"])
                memory = record_to_memory(record, entity_map)
                screen.memory(memory)  # credentials redacted on the way in
                pending.append(memory)
                if len(pending) >= batch:
                    flush()
            elif kind == "audit":
                row = _audit_row(screen.audit(record))
                # Already in this store (e.g. the same file imported twice).
                if present_audit[row] > 0:
                    present_audit[row] -= 1
                    audit_duplicates += 1
                    continue
                with meta.transaction():
                    meta.insert_audit_row(row)
                audit_rows += 1
        flush()
    finally:
        # Entities it wrote are in the store however far it got: the resolver reloads them.
        service.entities.invalidate()
        service.cache.invalidate()
    return {
        "imported": len(imported),
        "duplicates": duplicates,
        "entities": len(entity_map),
        "audit_rows": audit_rows,
        "audit_duplicates": audit_duplicates,
        **({"redacted": screen.redacted} if screen.redacted else {}),
    }


def _check_header(record: dict[str, Any]) -> bool:
    """An export's header line, refused when it is not ferrex's or from a newer ferrex."""
    if record.get("format") != EXPORT_FORMAT or int(record.get("version", 0)) > EXPORT_VERSION:
        raise FerrexError("invalid_params", "not a ferrex export file (or from a newer ferrex)")
    return True


def _json(value: Any) -> str:
    import json

    return json.dumps(value, sort_keys=True)


def _audit_row(record: dict[str, Any]) -> tuple[Any, ...]:
    """An audit entry as the row it is stored as (the identity used to skip re-imports)."""
    detail = record.get("detail")
    return (
        record["at"],
        record["namespace"],
        record["action"],
        record.get("memory_id"),
        record.get("other_id"),
        None if detail is None else _json(detail),
    )


def _import_entity(service: MemoryService, record: dict[str, Any], now: Any) -> int:
    meta = service.meta
    namespace = record["namespace"]
    existing = meta.entity_by_name(namespace, record["name"])
    with meta.transaction():
        if existing is not None:
            entity_id = existing.id
        else:
            vector = service.embedder.embed_documents([record["display_name"]])[0]
            free = meta.entity(int(record["id"])) is None
            entity_id = meta.insert_entity_row(
                {
                    "id": int(record["id"]) if free else None,
                    "namespace": namespace,
                    "name": record["name"],
                    "display_name": record["display_name"],
                    "entity_type": record.get("entity_type"),
                    "embedding": np.asarray(vector, dtype=np.float32).tobytes(),
                    "created_at": record["created_at"],
                    "updated_at": record["updated_at"],
                }
            )
        for alias in record.get("aliases") or []:
            meta.add_alias(
                namespace,
                alias["alias"],
                entity_id,
                alias["method"],
                float(alias["score"]),
                from_iso(alias["created_at"]),
            )
        for candidate in record.get("alias_candidates") or []:
            meta.add_alias_candidate(
                namespace,
                candidate["name"],
                entity_id,
                float(candidate["score"]),
                from_iso(candidate["created_at"]),
            )
    del now
    return entity_id
