"""Composition root: settings -> adapters -> MemoryService."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import structlog

from ferrex.config import Settings
from ferrex.core.errors import MODEL_UNAVAILABLE, FerrexError
from ferrex.core.ports import VectorIndex
from ferrex.core.service import (
    PIN_NAME,
    PIN_VARIANT,
    REBUILD_TARGET,
    REBUILD_TARGET_VARIANT,
    MemoryService,
)
from ferrex.embed.bm25 import Bm25Encoder
from ferrex.embed.embedder import FastEmbedEmbedder
from ferrex.embed.models import BUNDLED_MODEL, BUNDLED_VARIANT, EMBEDDING_TIERS, tier_for_model
from ferrex.embed.reranker import FastEmbedReranker
from ferrex.store.edge import EdgeIndex
from ferrex.store.sqlite import MetadataStore

log = structlog.get_logger("ferrex.bootstrap")


@dataclass
class Options:
    """Facts about how the settings were given that the settings alone do not carry."""

    explicit_model_tier: bool = False
    qdrant_client: object | None = None  # a ready QdrantClient (tests use ":memory:")
    embedder: FastEmbedEmbedder | None = None  # an already loaded model (rebuild-index)


class DataDirError(Exception):
    """The data dir cannot be created or used."""


def ensure_data_dir(path: Path) -> Path:
    """Create the data dir with mode 0700 (memories are private); tighten an existing one,
    saying so in the log (stderr)."""
    path = path.expanduser()
    try:
        if path.exists() and not path.is_dir():
            raise DataDirError(
                f"the data dir {path} exists and is not a directory; pass --data-dir DIR "
                "(or set FERREX_HOME) with a directory"
            )
        existed = path.exists()
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            os.chmod(path, 0o700)
            if existed:
                log.warning(
                    "tightened the permissions of the data dir to 0o700 (memories are private)",
                    path=str(path),
                    was=oct(mode),
                )
    except OSError as exc:
        raise DataDirError(
            f"cannot use {path} as the data dir ({exc.strerror or exc}); pass --data-dir DIR "
            "(or set FERREX_HOME) with a directory you can write"
        ) from None
    return path


def load_requested_model(settings: Settings) -> FastEmbedEmbedder:
    """Load exactly the model of ``settings.model_tier`` (for a model change), or refuse.

    Never substitutes the bundled model for another tier: re-embedding a store with a model
    other than the one asked for would be a silent model change.
    """
    tier = EMBEDDING_TIERS[settings.model_tier]
    is_bundled = tier.model.lower() == BUNDLED_MODEL.lower()
    embedder = FastEmbedEmbedder(
        settings.model_tier,
        settings.model_cache,
        model_path=settings.model_path,
        offline=settings.offline,
        allow_bundled=is_bundled and settings.offline_fallback,
        prefer_bundled=False,
        threads=settings.threads,
    )
    embedder.load()
    if embedder.info.name.lower() != tier.model.lower():  # pragma: no cover - defensive
        raise FerrexError(MODEL_UNAVAILABLE, f"loaded {embedder.info.name} instead of {tier.model}")
    return embedder


def build_service(settings: Settings, options: Options | None = None) -> MemoryService:
    options = options or Options()
    ensure_data_dir(settings.data_dir)
    meta = MetadataStore(settings.db_path)
    pinned = meta.get_meta(PIN_NAME)
    variant = meta.get_meta(PIN_VARIANT) or ""
    if pinned is None and meta.get_meta(REBUILD_TARGET):
        # An interrupted `rebuild-index --model-tier X`: resume with X, whatever is configured.
        pinned = meta.get_meta(REBUILD_TARGET)
        variant = meta.get_meta(REBUILD_TARGET_VARIANT) or ""
    tier = settings.model_tier
    prefer_bundled = False
    if pinned is not None and not options.explicit_model_tier:
        pinned_tier = tier_for_model(pinned)
        if pinned_tier is not None:
            tier = pinned_tier.tier  # type: ignore[assignment]
    if pinned is not None and variant == BUNDLED_VARIANT:
        prefer_bundled = True
    offline = settings.offline
    embedder = options.embedder or FastEmbedEmbedder(
        tier,
        settings.model_cache,
        model_path=settings.model_path,
        offline=offline,
        allow_bundled=settings.offline_fallback,
        prefer_bundled=prefer_bundled,
        threads=settings.threads,
    )
    reranker = FastEmbedReranker(
        settings.reranker_tier,
        settings.model_cache,
        reranker_path=settings.reranker_path,
        enabled=settings.rerank,
        offline=offline,
        threads=settings.threads,
    )
    index: VectorIndex
    if options.qdrant_client is not None or settings.qdrant_url:
        from ferrex.store.qdrant import QdrantIndex, fail_fast

        client = options.qdrant_client or fail_fast(
            settings.qdrant_url or "", settings.qdrant_api_key
        )
        mode = "external" if settings.qdrant_url else "local"
        index = QdrantIndex(client, mode=mode)  # type: ignore[arg-type]
    else:
        index = EdgeIndex(settings.index_path)
    service = MemoryService(
        settings,
        meta,
        index,
        embedder,
        Bm25Encoder(),
        reranker,
        explicit_model=options.explicit_model_tier,
    )
    try:
        service.check_pin()
    except FerrexError:
        service.close()  # release the index (its file lock) and the database at once
        raise
    return service
