"""Keys under which the store records (pins) the embedding model it was built with."""

from __future__ import annotations

PIN_NAME = "embedding_model"
PIN_DIMENSION = "embedding_dimension"
PIN_VARIANT = "embedding_variant"
PIN_SOURCE = "embedding_source"
REBUILD_PENDING = "rebuild_pending"
# Model a pending `rebuild-index --model-tier` re-embeds with (a restart resumes with it).
REBUILD_TARGET = "rebuild_target_model"
REBUILD_TARGET_VARIANT = "rebuild_target_variant"
