"""Secrets already in the store (``ferrex doctor``): memories stored before redaction existed, or
with ``secret_handling = "allow"``, superseded versions included. ``--repair`` redacts them in
place, re-embeds them, redacts the audit log's copies, and rewrites the database so that no
plaintext stays in SQLite's free pages or its WAL. Exports made earlier cannot be fixed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import structlog

from ferrex.core import errors
from ferrex.core.errors import FerrexError
from ferrex.core.memory import Memory, MemoryType
from ferrex.core.secrets import scan_marker
from ferrex.core.secrets.fields import MEMORY_TEXT_FIELDS, find_in_fields, scan_fields
from ferrex.core.secrets.scanner import Redaction, SecretScanner
from ferrex.core.service import MemoryService

log = structlog.get_logger("ferrex.secrets")

_SAMPLE = 20


def redact_memory(scanner: SecretScanner, memory: Memory) -> list[Redaction]:
    """Redact ``memory``'s text fields in place; what was redacted."""
    fields = {name: getattr(memory, name) for name in MEMORY_TEXT_FIELDS}
    predicate = memory.predicate if memory.type is MemoryType.SEMANTIC else None
    changed, redactions = find_in_fields(scanner, fields, predicate)
    for name, value in changed.items():
        setattr(memory, name, value)
    if "object" in changed and memory.content and memory.object is not None:
        # A fact's content is its triple in words: the value it names goes too.
        memory.content = scanner.redact(memory.content)[0]
    return redactions


def sweep(service: MemoryService, *, repair: bool, full: bool = False) -> dict[str, Any]:
    """Count the memories holding secrets (by kind, with a sample of ids, never a value); with
    ``repair`` (and ``secret_handling`` other than ``allow``) redact and re-index them.

    Incremental (``scan_marker``): only what was written since the last scan and what it found
    is read, unless ``full``, the first time, or when the scanner or its settings changed."""
    settings = service.deps.settings
    scanner = SecretScanner(settings.secrets.patterns, settings.secrets.allow)
    meta = service.meta
    expected = scan_marker.fingerprint(settings)
    previous, why_full = (
        (None, "--full") if full else scan_marker.load(meta.get_meta(scan_marker.KEY), expected)
    )
    # Read before the scan: whatever is written meanwhile is read again by the next one.
    recording, writes_at, audit_at = meta.text_writes_start()
    if previous is not None and not recording:  # writes since may not have been recorded
        previous, why_full = None, "the record of writes was off"
    memories, audit_rows = _scope(service, previous)
    holding: list[Memory] = []
    kinds: Counter[str] = Counter()
    scanned = 0
    for memory in memories:
        scanned += 1
        found = redact_memory(scanner, memory)
        if found:
            holding.append(memory)
            kinds.update(r.kind for r in found)
    audit, audit_scanned = _audit_with_secrets(audit_rows, scanner)
    report: dict[str, Any] = {
        "handling": settings.secret_handling,
        "memories": len(holding),
        "kinds": dict(sorted(kinds.items())),
        "sample": [m.id for m in holding[:_SAMPLE]],
        "audit_entries": len(audit),
        "scanned": "full" if previous is None else "incremental",
        "rows_scanned": {"memories": scanned, "audit_entries": audit_scanned},
        **({"full_because": why_full} if previous is None else {}),
    }
    may_repair = settings.secret_handling != "allow"
    report["ok"] = not holding and not audit if may_repair else True
    marker = scan_marker.ScanMarker(
        expected, writes_at, audit_at, [m.id for m in holding], [seq for seq, _ in audit]
    )
    if repair and may_repair and (holding or audit):
        _repair(service, holding, audit)
        report["redacted"] = len(holding)
        report["ok"] = True
        # Redacted: nothing left to read again (the rewrites are recorded as text writes).
        marker.holders, marker.audit_hits = [], []
        log.info("secrets redacted", memories=len(holding), audit_entries=len(audit))
    _record(service, marker)
    return report


def _record(service: MemoryService, marker: scan_marker.ScanMarker) -> None:
    """Store ``marker`` unless a scan that started later already recorded a later position (two
    doctors at once: the later one read all this one read and more; going back would forget the
    holders only it found), and forget the writes up to ``marker``'s position."""
    meta = service.meta
    with service.deps.write, meta.transaction():
        stored, _ = scan_marker.load(meta.get_meta(scan_marker.KEY), marker.fingerprint)
        if stored is None or stored.writes <= marker.writes:
            meta.set_meta(scan_marker.KEY, marker.dumps())
        meta.text_writes_forget(marker.writes)


def _scope(
    service: MemoryService, previous: scan_marker.ScanMarker | None
) -> tuple[Iterable[Memory], Iterator[tuple[int, dict[str, Any]]]]:
    """What to scan: everything, or since ``previous`` (the memories and audit rows written
    after it, and those it found holding secrets)."""
    meta = service.meta
    if previous is None:
        return meta.iter_memories(), meta.audit_details()
    written, rewritten_audit = meta.text_writes_since(previous.writes)
    ids = list(dict.fromkeys([*previous.holders, *written]))
    audit = meta.audit_details(previous.audit, [*previous.audit_hits, *rewritten_audit])
    return _memories_by_id(service, ids), audit


def _memories_by_id(service: MemoryService, ids: list[str]) -> Iterator[Memory]:
    """The memories of ``ids`` that still exist, in that order, 500 at a time."""
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        found = service.meta.get_memories(chunk)
        yield from (found[i] for i in chunk if i in found)


def _audit_with_secrets(
    rows: Iterable[tuple[int, dict[str, Any]]], scanner: SecretScanner
) -> tuple[list[tuple[int, dict[str, Any]]], int]:
    """The audit rows holding secrets (redacted details), and how many rows were read."""
    out = []
    read = 0
    for seq, detail in rows:
        read += 1
        changed, found = scan_fields(scanner, detail)
        if found:
            out.append((seq, {**detail, **changed}))
    return out, read


def _repair(
    service: MemoryService, memories: list[Memory], audit: list[tuple[int, dict[str, Any]]]
) -> None:
    meta, sync = service.meta, service.sync
    with service.deps.write:
        with meta.transaction():
            for memory in memories:
                meta.rewrite_text(memory)
            for seq, detail in audit:
                meta.set_audit_detail(seq, detail)
        for start in range(0, len(memories), 128):
            sync.write_points(sync.plan(memories[start : start + 128]), replace=True)
        meta.scrub()
        service.cache.invalidate()


class ImportScreen:
    """``secret_handling`` on ``ferrex import``: an export from an older store (or one with
    ``allow``) is redacted on the way in; with ``refuse`` a file holding secrets imports
    nothing."""

    def __init__(self, service: MemoryService) -> None:
        settings = service.deps.settings
        self.handling = settings.secret_handling
        self.scanner = SecretScanner(settings.secrets.patterns, settings.secrets.allow)
        self.redacted = 0

    def refuse_if_any(self, records: list[dict[str, Any]]) -> None:
        if self.handling == "refuse":
            refuse_secrets(records, self.scanner)

    def memory(self, memory: Memory) -> None:
        if self.handling != "allow" and redact_memory(self.scanner, memory):
            self.redacted += 1

    def audit(self, record: dict[str, Any]) -> dict[str, Any]:
        detail = record.get("detail")
        if self.handling == "allow" or not isinstance(detail, dict):
            return record
        changed = scan_fields(self.scanner, detail)[0]
        return {**record, "detail": {**detail, **changed}} if changed else record


def refuse_secrets(records: list[dict[str, Any]], scanner: SecretScanner) -> None:
    """A ``secret_detected`` refusal when any memory record of an export holds a secret (the
    whole file is checked before anything is imported)."""
    holding = 0
    for record in records:
        if record.get("kind") != "memory":
            continue
        fields = {name: record.get(name) for name in MEMORY_TEXT_FIELDS}
        holding += bool(find_in_fields(scanner, fields, record.get("predicate"))[1])
    if holding:
        raise FerrexError(
            errors.SECRET_DETECTED,
            f"import: {holding} memories of this file hold what looks like a credential; "
            "nothing was imported (secret_handling = refuse). Import it with "
            "secret_handling = redact to store them redacted",
        )
