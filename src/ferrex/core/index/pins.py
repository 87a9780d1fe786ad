"""Keys under which the store records (pins) the embedding model it was built with, and the
write of that pin."""

from __future__ import annotations

from ferrex.core.ports import ModelInfo, StoreMeta

PIN_NAME = "embedding_model"
PIN_DIMENSION = "embedding_dimension"
PIN_VARIANT = "embedding_variant"
PIN_SOURCE = "embedding_source"
REBUILD_PENDING = "rebuild_pending"
# Model a pending `rebuild-index --model-tier` re-embeds with (a restart resumes with it).
REBUILD_TARGET = "rebuild_target_model"
REBUILD_TARGET_VARIANT = "rebuild_target_variant"


def pin_model(meta: StoreMeta, info: ModelInfo) -> None:
    """Record ``info`` as the model the store is built with (the one place that writes the pin;
    inside the caller's transaction)."""
    meta.set_meta(PIN_NAME, info.name)
    meta.set_meta(PIN_DIMENSION, str(info.dimension))
    meta.set_meta(PIN_VARIANT, info.variant)
    meta.set_meta(PIN_SOURCE, info.source)
