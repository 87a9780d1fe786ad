"""Composition root: settings -> adapters -> MemoryService."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog

from ferrex.config import Settings
from ferrex.core import errors
from ferrex.core.errors import MODEL_UNAVAILABLE, FerrexError, StorageSpaceError, storage_full
from ferrex.core.index.pins import PIN_NAME, PIN_VARIANT, REBUILD_TARGET, REBUILD_TARGET_VARIANT
from ferrex.core.ports import VectorIndex
from ferrex.core.service import MemoryService
from ferrex.datadir import ensure_data_dir
from ferrex.embed.bm25 import Bm25Encoder
from ferrex.embed.embedder import FastEmbedEmbedder
from ferrex.embed.models import BUNDLED_MODEL, BUNDLED_VARIANT, EMBEDDING_TIERS, tier_for_model
from ferrex.embed.reranker import FastEmbedReranker
from ferrex.store import edge_disk
from ferrex.store.edge import EdgeIndex
from ferrex.store.sqlite import SqliteStore

log = structlog.get_logger("ferrex.bootstrap")


@dataclass
class Options:
    """Facts about how the settings were given that the settings alone do not carry."""

    explicit_model_tier: bool = False
    qdrant_client: object | None = None  # a ready QdrantClient (tests use ":memory:")
    embedder: FastEmbedEmbedder | None = None  # an already loaded model (rebuild-index)


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
        spin=settings.runtime_spin,
    )
    embedder.load()
    if embedder.info.name.lower() != tier.model.lower():  # pragma: no cover - defensive
        raise FerrexError(MODEL_UNAVAILABLE, f"loaded {embedder.info.name} instead of {tier.model}")
    return embedder


INDEX_MODE = "index_mode"  # meta key: "embedded" or "sidecar" (where this store's vectors are)
INDEX_MODES = ("embedded", "sidecar")
_SEARCHED = "--qdrant-bin, FERREX_QDRANT_BIN, PATH, <data dir>/bin/qdrant"


@dataclass(frozen=True)
class ModeChoice:
    mode: str  # embedded | sidecar | external | local
    reason: str
    binary: Any = None  # the sidecar's Binary


def choose_index_mode(settings: Settings, meta: SqliteStore) -> ModeChoice:
    """Which vector index this process opens, and why (never a silent switch of a store).

    ``--qdrant-url`` wins (external). Otherwise the store keeps the mode it was created in
    (recorded in SQLite; a store from before modes existed is embedded); a new store gets the
    sidecar when a ``qdrant`` binary is found, else the embedded engine. The choice is recorded.
    """
    choice = decide_index_mode(settings, meta.get_meta(INDEX_MODE), meta.get_meta(PIN_NAME))
    if choice.mode == "unavailable":
        raise FerrexError(errors.UNAVAILABLE, choice.reason)
    if choice.mode in INDEX_MODES and meta.get_meta(INDEX_MODE) != choice.mode:
        meta.set_meta(INDEX_MODE, choice.mode)
    return choice


def decide_index_mode(settings: Settings, recorded: str | None, pinned: str | None) -> ModeChoice:
    """The rule behind ``choose_index_mode`` (mode ``unavailable``: a refusal, with why)."""
    from ferrex.runtime.sidecar import find_binary

    if settings.qdrant_url:
        return ModeChoice("external", "--qdrant-url is set (vectors on that Qdrant server)")
    try:
        binary = find_binary(settings.qdrant_bin, settings.data_dir)
    except FerrexError as exc:
        return ModeChoice("unavailable", exc.message)
    if recorded == "sidecar":
        if binary is None:
            return ModeChoice(
                "unavailable",
                "this store's vectors are in a Qdrant sidecar but no qdrant binary was found "
                f"({_SEARCHED}); install qdrant or point --qdrant-bin at it, or run "
                "`ferrex migrate-index --to embedded` to rebuild the index in the embedded engine",
            )
        return ModeChoice(
            "sidecar",
            f"this store's index is in the sidecar (qdrant from {binary.found_by})",
            binary,
        )
    if recorded == "embedded" or pinned is not None:
        reason = "this store's index is in the embedded engine"
        if binary is not None:
            reason += (
                f"; a qdrant binary was found ({binary.found_by}): "
                "`ferrex migrate-index --to sidecar` moves the index there"
            )
        return ModeChoice("embedded", reason)
    if binary is not None:
        return ModeChoice(
            "sidecar", f"new store and a qdrant binary was found ({binary.found_by})", binary
        )
    return ModeChoice("embedded", f"no qdrant binary found ({_SEARCHED})")


def preview_index_mode(settings: Settings) -> ModeChoice:
    """What ``choose_index_mode`` will pick, read-only (safe while another process owns the
    store): for the start-up line, before the store is opened."""
    import sqlite3

    recorded = pinned = None
    if settings.db_path.exists():
        try:
            connection = sqlite3.connect(f"file:{settings.db_path}?mode=ro", uri=True, timeout=5)
            try:
                rows = dict(
                    connection.execute(
                        "SELECT key, value FROM meta WHERE key IN (?, ?)", (INDEX_MODE, PIN_NAME)
                    ).fetchall()
                )
            finally:
                connection.close()
            recorded, pinned = rows.get(INDEX_MODE), rows.get(PIN_NAME)
        except sqlite3.Error:
            pass
    return decide_index_mode(settings, recorded, pinned)


def open_sidecar_index(settings: Settings, binary: Any, reason: str) -> VectorIndex:
    """Start (or reuse) the data dir's sidecar and open the qdrant-client adapter on it."""
    from ferrex.runtime.ownership import attached
    from ferrex.runtime.sidecar import Sidecar, connect_client
    from ferrex.store.qdrant import QdrantIndex

    sidecar = Sidecar(settings.data_dir, binary)
    endpoint = sidecar.ensure_running()
    attach = attached(settings.data_dir)

    def leave() -> None:
        sidecar.release(attach.alone)

    try:
        client = connect_client(endpoint)
    except BaseException:
        leave()
        raise
    details = {"sidecar": {**endpoint.describe(), "binary": str(binary.path)}}
    return QdrantIndex(
        client,
        mode="sidecar",
        reason=reason,
        details=details,
        on_close=leave,
        config=settings.qdrant,
    )


def open_index(
    settings: Settings, meta: SqliteStore, options: Options, mode: str | None = None
) -> VectorIndex:
    """The vector index for this store: ``mode`` when given (migrate-index), else chosen."""
    if options.qdrant_client is not None:
        from ferrex.store.qdrant import QdrantIndex

        return QdrantIndex(
            options.qdrant_client,  # type: ignore[arg-type]
            mode="local",
            config=settings.qdrant,
        )
    if mode is None:
        choice = choose_index_mode(settings, meta)
    elif mode == "sidecar":
        from ferrex.runtime.sidecar import find_binary

        binary = find_binary(settings.qdrant_bin, settings.data_dir)
        if binary is None:
            raise FerrexError(
                errors.UNAVAILABLE, f"no qdrant binary found ({_SEARCHED}); nothing was changed"
            )
        choice = ModeChoice("sidecar", "migrate-index --to sidecar", binary)
    else:
        choice = ModeChoice("embedded", "migrate-index --to embedded")
    if choice.mode == "external":
        from ferrex.store.qdrant import QdrantIndex, fail_fast

        client = fail_fast(settings.qdrant_url or "", settings.qdrant_api_key)
        return QdrantIndex(client, mode="external", reason=choice.reason, config=settings.qdrant)
    if choice.mode == "sidecar":
        return open_sidecar_index(settings, choice.binary, choice.reason)
    return EdgeIndex(
        settings.index_path,
        reason=choice.reason,
        optimize_min_unindexed=settings.retrieval.hnsw_build_min_unindexed,
    )


def build_service(
    settings: Settings, options: Options | None = None, index_mode: str | None = None
) -> MemoryService:
    options = options or Options()
    ensure_data_dir(settings.data_dir)
    try:
        # Before SQLite or the engine touches the disk: the index's files backed, and room
        # for SQLite's own (store/edge_disk.py). The server stays up, answering this error.
        edge_disk.require_free(
            settings.data_dir,
            edge_disk.unbacked_bytes(settings.index_path) + edge_disk.OPEN_MARGIN_BYTES,
            "opening the memory store",
        )
        return _build_service(settings, options, index_mode)
    except StorageSpaceError as exc:
        log.error("the disk holding the store is full", data_dir=str(settings.data_dir))
        raise storage_full(exc, opening=True) from exc


def _build_service(settings: Settings, options: Options, index_mode: str | None) -> MemoryService:
    meta = SqliteStore(settings.db_path)
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
        spin=settings.runtime_spin,
    )
    reranker = FastEmbedReranker(
        settings.reranker_tier,
        settings.model_cache,
        reranker_path=settings.reranker_path,
        enabled=settings.rerank,
        offline=offline,
        threads=settings.threads,
        spin=settings.runtime_spin,
    )
    try:
        index = open_index(settings, meta, options, index_mode)
    except BaseException:
        meta.close()
        raise
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
