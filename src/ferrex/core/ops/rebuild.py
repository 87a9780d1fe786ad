"""``ferrex rebuild-index``: the vector index recreated from SQLite (and the entity names
re-embedded), optionally pinning the store to the model in use."""

from __future__ import annotations

from typing import Any

import structlog

from ferrex.core.index.pins import (
    REBUILD_PENDING,
    REBUILD_TARGET,
    REBUILD_TARGET_VARIANT,
    pin_model,
)
from ferrex.core.index.sync import ProgressFn
from ferrex.core.service import MemoryService

log = structlog.get_logger("ferrex.ops")


def rebuild(
    service: MemoryService, progress: ProgressFn | None = None, *, repin: bool = False
) -> dict[str, Any]:
    """Recreate the vector index from SQLite (and re-embed entity names)."""
    meta = service.meta
    with service.deps.write:
        meta.set_meta(REBUILD_PENDING, "1")
        info = service.embedder.info
        if repin:
            with meta.transaction():
                pin_model(meta, info)
        reembed_entities(service)
        count = service.sync.rebuild(progress)
        meta.set_meta(REBUILD_PENDING, "")
        meta.delete_meta(REBUILD_TARGET)
        meta.delete_meta(REBUILD_TARGET_VARIANT)
        service.cache.invalidate()
        service.entities.invalidate()
    # No optimize() here: building the HNSW graph makes dense search approximate and may reorder
    # ties, so a rebuilt store would not rank exactly as the original.
    return {"memories": count, "model": info.pin, "dimension": info.dimension}


def reembed_entities(service: MemoryService) -> int:
    try:
        return service.sync.reembed_entities()
    finally:
        service.entities.invalidate()  # the name embeddings it compares changed
