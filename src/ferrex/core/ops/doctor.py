"""``ferrex doctor``: SQLite and the index reconciled (what is missing, orphaned, split wrong or
of another model), the disk, the model, the reranker, secrets already stored; ``--repair``."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Any

import structlog

from ferrex import __version__
from ferrex.core.errors import FerrexError
from ferrex.core.ids import point_id
from ferrex.core.index.pins import (
    PIN_DIMENSION,
    PIN_NAME,
    PIN_VARIANT,
)
from ferrex.core.secrets.sweep import sweep
from ferrex.core.service import MemoryService

log = structlog.get_logger("ferrex.ops")

_SAMPLE = 20


def doctor(service: MemoryService, *, repair: bool = False, full: bool = False) -> dict[str, Any]:
    """Compare SQLite (truth) with the vector index; with ``repair`` make them agree. The
    secret scan reads only what changed since the last one unless ``full``."""
    settings = service.deps.settings
    meta = service.meta
    report: dict[str, Any] = {"version": __version__, "data_dir": str(settings.data_dir)}
    mode = stat.S_IMODE(os.stat(settings.data_dir).st_mode)
    report["permissions"] = {"mode": oct(mode), "ok": not mode & 0o077}
    report["schema_version"] = meta.schema_version
    report["disk"] = _disk(service)
    report["mode"] = service.index.mode
    report["index_mode"] = _index_mode(service)
    report["model"] = model = _model(service)
    report["reranker"] = _reranker(service)
    report["journal_backlog"] = meta.journal_backlog()
    report["replayed_at_start"] = getattr(service, "replayed_at_start", 0)
    available = bool(model.get("available"))
    if repair and available:
        with service.deps.write:
            report["replayed"] = service.sync.recover()
    comparison = _Comparison.of(service, available)
    report.update(comparison.report(report["journal_backlog"]))
    if repair and available and not report["in_agreement"]:
        report["repaired"] = _repair_index(service, comparison)
        after = _Comparison.of(service, available).report(meta.journal_backlog())
        report["in_agreement"] = after["in_agreement"]
        report["after_repair"] = {key: after[key] for key in _AFTER_REPAIR}
    report["secrets"] = secrets = sweep(service, repair=repair and available, full=full)
    report["ok"] = bool(
        report["in_agreement"] and available and report["permissions"]["ok"] and secrets["ok"]
    )
    return report


_AFTER_REPAIR = (
    "missing_in_index",
    "orphans_in_index",
    "chunk_mismatch",
    "model_mismatch",
    "journal_backlog",
)


@dataclass
class _Comparison:
    """SQLite's memories (id -> expected points) against the index's points (by memory)."""

    expected: dict[str, int]
    actual: dict[str, list[str]]
    missing: list[str]
    orphans: list[str]
    mismatched: list[str]
    wrong_model: list[str]

    @classmethod
    def of(cls, service: MemoryService, available: bool) -> _Comparison:
        expected = service.meta.all_memory_ids()
        actual: dict[str, list[str]] = {}
        models: dict[str, set[str]] = {}
        if available:
            for pid, payload in service.index.point_payloads(["memory_id", "model"]):
                memory_id = str(payload.get("memory_id", ""))
                actual.setdefault(memory_id, []).append(pid)
                models.setdefault(memory_id, set()).add(str(payload.get("model")))
        mismatched = sorted(
            mid
            for mid, count in expected.items()
            if mid in actual and set(actual[mid]) != {point_id(mid, i) for i in range(count)}
        )
        # Points of another model are invisible to recall (it filters on the pinned model).
        pin = service.embedder.info.pin if available else None
        wrong_model = sorted(
            mid
            for mid in expected
            if mid in models and models[mid] != {pin} and mid not in mismatched
        )
        return cls(
            expected,
            actual,
            sorted(mid for mid in expected if mid not in actual),
            sorted(mid for mid in actual if mid not in expected),
            mismatched,
            wrong_model,
        )

    def report(self, backlog: int) -> dict[str, Any]:
        def sample(ids: list[str]) -> dict[str, Any]:
            return {"count": len(ids), "sample": ids[:_SAMPLE]}

        points = sum(len(v) for v in self.actual.values())
        return {
            "sqlite": {
                "memories": len(self.expected),
                "expected_points": sum(self.expected.values()),
            },
            "index": {"points": points, "memories": len(self.actual)},
            "missing_in_index": sample(self.missing),
            "orphans_in_index": sample(self.orphans),
            "chunk_mismatch": sample(self.mismatched),
            "model_mismatch": sample(self.wrong_model),
            "journal_backlog": backlog,
            "in_agreement": not (self.missing or self.orphans or self.mismatched)
            and not self.wrong_model
            and backlog == 0,
        }


def _repair_index(service: MemoryService, comparison: _Comparison) -> dict[str, int]:
    """Re-index what is missing, split wrong or of another model; drop orphan points."""
    c = comparison
    with service.deps.write:
        todo = list(service.meta.get_memories(c.missing + c.mismatched + c.wrong_model).values())
        for start in range(0, len(todo), 128):
            service.sync.write_points(service.sync.plan(todo[start : start + 128]), replace=True)
        orphan_points = [p for mid in c.orphans for p in c.actual[mid]]
        service.index.delete_points(orphan_points)
        service.cache.invalidate()
    return {"reindexed": len(todo), "orphan_points_removed": len(orphan_points)}


def _disk(service: MemoryService) -> dict[str, Any]:
    """Free space on the disk holding the store, and the warning below lifecycle.min_free_mb."""
    free = service.upkeep.free_bytes()
    return {
        "free_mb": None if free is None else round(free / 1024 / 1024, 1),
        "warning": service.upkeep.low_disk_warning(),
    }


def _index_mode(service: MemoryService) -> dict[str, Any]:
    index_stats = service.index.stats()
    return {
        "mode": index_stats.mode,
        "reason": index_stats.reason or None,
        **({"sidecar": index_stats.details["sidecar"]} if "sidecar" in index_stats.details else {}),
    }


def _model(service: MemoryService) -> dict[str, Any]:
    """Whether the model loads (and pins on a new store), and the store's pin."""
    meta = service.meta
    model: dict[str, Any] = {}
    try:
        service.ensure_ready()  # loads the model and pins it on a new store
        info = service.embedder.info
        model.update(available=True, loaded=info.name, source=info.source)
    except FerrexError as exc:
        model.update(available=False, error=exc.message)
    model.update(
        pinned=meta.get_meta(PIN_NAME),
        dimension=int(meta.get_meta(PIN_DIMENSION) or 0) or None,
        variant=meta.get_meta(PIN_VARIANT) or None,
    )
    return model


def _reranker(service: MemoryService) -> dict[str, Any]:
    if service.deps.settings.rerank:
        # An operator check: say now whether it loads; a one-shot command never leaves a
        # download running in a thread when it exits.
        service.reranker.load(download=False)
    return {
        "enabled": service.deps.settings.rerank,
        "available": service.reranker.available,
        "reason": service.reranker.unavailable_reason,
    }
