"""Shared fixtures. Every component is real: SQLite, Qdrant Edge, fastembed with the PyPI-shipped
all-MiniLM-L6-v2 (offline extra), and the MCP SDK's stdio client talking to a ``ferrex`` process.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.harness import ServiceFactory, make_settings

from ferrex.core.clock import Clock, utcnow
from ferrex.core.service import MemoryService
from ferrex.embed.bm25 import Bm25Encoder
from ferrex.embed.embedder import FastEmbedEmbedder
from ferrex.embed.reranker import FastEmbedReranker
from ferrex.logs import configure
from ferrex.store.edge import EdgeIndex
from ferrex.store.sqlite import SqliteStore

configure("warning")


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One model cache for the whole run (the bundled model is laid out once)."""
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def embedder(models_dir: Path) -> FastEmbedEmbedder:
    """The real embedding model, loaded once per session (all-MiniLM-L6-v2, bundled, offline)."""
    model = FastEmbedEmbedder(
        "small", models_dir, offline=True, allow_bundled=True, prefer_bundled=True
    )
    model.load()
    return model


@pytest.fixture
def make_service(
    tmp_path: Path, models_dir: Path, embedder: FastEmbedEmbedder
) -> Iterator[ServiceFactory]:
    """Build an in-process MemoryService on real adapters (shared model, fresh data dir)."""
    created: list[MemoryService] = []

    def factory(
        data_dir: Path | None = None,
        *,
        clock: Clock = utcnow,
        reranker: Any = None,
        index: Any = None,
        **overrides: Any,
    ) -> MemoryService:
        directory = data_dir or tmp_path / f"data{len(created)}"
        directory.mkdir(parents=True, exist_ok=True)
        settings = make_settings(directory, models_dir, **overrides)
        meta = SqliteStore(settings.db_path)
        service = MemoryService(
            settings,
            meta,
            index if index is not None else EdgeIndex(settings.index_path),
            embedder,
            Bm25Encoder(),
            reranker
            if reranker is not None
            else FastEmbedReranker("default", models_dir, enabled=False, offline=True),
            clock=clock,
        )
        created.append(service)
        return service

    yield factory
    for service in created:
        service.close()


@pytest.fixture
def service(make_service: ServiceFactory) -> MemoryService:
    return make_service()


# --------------------------------------------------------------------------- MCP over stdio
