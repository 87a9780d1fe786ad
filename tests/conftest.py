"""Shared fixtures. Every component is real: SQLite, Qdrant Edge, fastembed with the PyPI-shipped
all-MiniLM-L6-v2 (offline extra), and the MCP SDK's stdio client talking to a ``ferrex`` process.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from ferrex.config import Settings, load_settings
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


def make_settings(data_dir: Path, models_dir: Path, **overrides: Any) -> Settings:
    cli: dict[str, Any] = {
        "data_dir": str(data_dir),
        "model_tier": "small",
        "offline": True,
        "models_dir": str(models_dir),
        "rerank": False,
        # In-process services return every candidate, as before the relevance floor and the
        # answer gate: these tests check filters, budgets, limits and ordering on tiny made-up
        # stores. Floor and gate are tested through MCP with the real defaults
        # (test_relevance_floor.py).
        "retrieval.min_score": 0.0,
        "retrieval.answer_gate.relevance": 0.0,
        "retrieval.answer_gate.cosine": 0.0,
    }
    cli.update(overrides)
    settings, _ = load_settings(cli=cli, environ={})
    return settings


ServiceFactory = Callable[..., MemoryService]


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


def ferrex_command() -> str:
    found = shutil.which("ferrex", path=os.path.dirname(sys.executable)) or shutil.which("ferrex")
    assert found, "the ferrex console script is not installed (pip install -e '.[test,offline]')"
    return found


def server_params(
    data_dir: Path, models_dir: Path, *args: str, **env: str
) -> StdioServerParameters:
    environment = {
        "FERREX_HOME": str(data_dir),
        "FERREX_MODELS_DIR": str(models_dir),
        "FERREX_OFFLINE": "1",
        "FERREX_LOG": "warning",
        # Full pages, as before the relevance floor and the answer gate (see make_settings);
        # their own test passes the defaults explicitly.
        "FERREX_RETRIEVAL__MIN_SCORE": "0",
        "FERREX_RETRIEVAL__ANSWER_GATE__RELEVANCE": "0",
        "FERREX_RETRIEVAL__ANSWER_GATE__COSINE": "0",
    }
    environment.update(env)
    arguments = list(args)
    if "--model-tier" not in arguments:
        arguments = ["--model-tier", "small", *arguments]
    return StdioServerParameters(command=ferrex_command(), args=arguments, env=environment)


@asynccontextmanager
async def mcp_client(
    data_dir: Path, models_dir: Path, *args: str, mode: str = "auto", **env: str
) -> AsyncIterator[Client]:
    """A real MCP client session with a ``ferrex`` subprocess on ``data_dir``."""
    async with Client(server_params(data_dir, models_dir, *args, **env), mode=mode) as client:
        yield client


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Call a tool; return its structured content (errors come back as {"error": ...})."""
    result = await client.call_tool(tool, arguments)
    payload = result.structured_content
    if payload is None:
        payload = json.loads(result.content[0].text)  # type: ignore[union-attr]
    if result.is_error:
        assert "error" in payload, payload
        return payload
    return payload


async def ok(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    payload = await call(client, tool, arguments)
    assert "error" not in payload, payload
    return payload
