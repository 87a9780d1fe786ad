"""What many tests share: settings for a test data dir, the ``ferrex`` command, a real MCP
client session over stdio (``mcp_client``, ``call``, ``ok``; ``logged_client`` keeps the server's
log), and the operator CLI as a subprocess (``cli``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

from ferrex.config import Settings, load_settings
from ferrex.core.service import MemoryService


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


@asynccontextmanager
async def logged_client(
    data_dir: Path, models_dir: Path, log: Path, *args: str, **env: str
) -> AsyncIterator[Client]:
    """``mcp_client`` whose server writes its stderr (the log) to ``log``."""
    plain = server_params(data_dir, models_dir, *args, **env)
    wrapped = StdioServerParameters(
        command="/bin/sh",
        args=["-c", 'exec "$@" 2>>"$0"', str(log), plain.command, *plain.args],
        env=plain.env,
    )
    async with Client(wrapped) as client:
        yield client


def cli_env(data_dir: Path, models_dir: Path) -> dict[str, str]:
    """An operator's environment for this data dir: offline, quiet logs."""
    return {
        **os.environ,
        "FERREX_HOME": str(data_dir),
        "FERREX_MODELS_DIR": str(models_dir),
        "FERREX_OFFLINE": "1",
        "FERREX_LOG": "error",
    }


def cli(
    data_dir: Path,
    models_dir: Path,
    *args: str,
    check: int | None = 0,
    env: dict[str, str] | None = None,
) -> Any:
    """``ferrex *args`` as an operator runs it (``cli_env``; ``env``: more variables over it)."""
    done = subprocess.run(
        [ferrex_command(), *args],
        env={**cli_env(data_dir, models_dir), **(env or {})},
        capture_output=True,
        text=True,
        timeout=180,
    )
    if check is not None:
        assert done.returncode == check, (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
    return done
