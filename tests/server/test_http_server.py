"""The team server: ``ferrex serve --http`` over the mcp SDK's streamable-HTTP transport.

A real ``ferrex`` process on a loopback port; real SDK clients (``streamable_http_client``)
with a bearer token store and recall; requests without or with a wrong token get 401 and
change nothing; four concurrent clients making mixed calls see no error and lose no write;
binding a non-loopback interface without a configured token is refused.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from tests.support.harness import ferrex_command, ok
from tests.support.sentences import FINDINGS

pytestmark = pytest.mark.anyio
TOKEN = "team-token-0123456789abcdef"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def environment(data_dir: Path, models_dir: Path, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "FERREX_HOME": str(data_dir),
        "FERREX_MODELS_DIR": str(models_dir),
        "FERREX_OFFLINE": "1",
        "FERREX_LOG": "warning",
        "FERREX_MODEL_TIER": "small",
        "FERREX_RERANK": "false",
        "PATH": "/usr/bin:/bin",
    }
    env.pop("FERREX_HTTP_TOKEN", None)
    env.update(extra)
    return env


def wait_listening(port: int, process: subprocess.Popen[str], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(
                f"ferrex exited: {process.stderr.read() if process.stderr else ''}"
            )
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError("the team server did not listen in time")


@pytest.fixture
def team_server(tmp_path: Path, models_dir: Path) -> Iterator[tuple[str, Path]]:
    port = free_port()
    data_dir = tmp_path / "data"
    process = subprocess.Popen(
        [ferrex_command(), "serve", "--http", f"127.0.0.1:{port}"],
        env=environment(data_dir, models_dir, FERREX_HTTP_TOKEN=TOKEN),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_listening(port, process)
        yield f"http://127.0.0.1:{port}/mcp", data_dir
    finally:
        process.terminate()
        try:
            out, _ = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            out, _ = process.communicate()
        assert out == "", "the team server wrote to stdout"
    assert process.returncode == 0


@asynccontextmanager
async def http_client(url: str, token: str = TOKEN) -> AsyncIterator[Client]:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        yield client


def _messages(error: BaseException) -> str:
    """Every message inside (possibly nested) exception groups."""
    if isinstance(error, BaseExceptionGroup):
        return " | ".join(_messages(inner) for inner in error.exceptions)
    return f"{type(error).__name__}: {error}"


async def test_a_client_stores_and_recalls_over_http(team_server: tuple[str, Path]) -> None:
    url, _ = team_server
    async with http_client(url) as client:
        tools = await client.list_tools()
        assert {t.name for t in tools.tools} == {"store", "recall", "forget", "reflect", "stats"}
        stored = await ok(client, "store", {"content": "the team server runs on port 8765"})
    async with http_client(url) as other:  # another agent, another session, same store
        found = await ok(other, "recall", {"query": "which port does the team server use"})
    assert stored["id"] in [r["id"] for r in found["results"]]


async def test_no_or_a_wrong_token_is_401_and_changes_nothing(
    team_server: tuple[str, Path],
) -> None:
    url, _ = team_server
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "0"},
        },
    }
    store = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "store", "arguments": {"content": "an intruder was here"}},
    }
    headers = {"accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient() as raw:
        for auth in ({}, {"Authorization": "Bearer wrong-token"}, {"Authorization": TOKEN}):
            for message in (initialize, store):
                answer = await raw.post(url, json=message, headers={**headers, **auth})
                assert answer.status_code == 401, answer.text
                assert answer.json()["error"]["code"] == "unauthorized"
                assert "Bearer" in answer.headers["www-authenticate"]
    with pytest.raises(BaseException) as refused:  # the SDK client cannot even initialize
        with anyio.fail_after(30):
            async with http_client(url, token="not-the-token") as client:
                await client.list_tools()
    assert "Server returned an error response" in _messages(refused.value)
    async with http_client(url) as client:
        stats = await ok(client, "stats", {"detailed": True})
        found = await ok(client, "recall", {"query": "intruder", "limit": 5})
    assert stats["total"] == 0 and found["results"] == []


async def test_four_concurrent_clients_mixed_calls_no_errors_no_lost_writes(
    team_server: tuple[str, Path],
) -> None:
    url, _ = team_server
    errors: list[str] = []
    stored: dict[int, list[str]] = {n: [] for n in range(4)}

    async def agent(number: int) -> None:
        async with http_client(url) as client:
            for round_ in range(5):
                calls: list[tuple[str, dict[str, Any]]] = [
                    ("store", {"content": FINDINGS[number * 5 + round_]}),
                    ("recall", {"query": FINDINGS[(number * 5 + round_ + 7) % 20], "limit": 3}),
                    ("stats", {}),
                ]
                for tool, arguments in calls:
                    result = await client.call_tool(tool, arguments)
                    payload = result.structured_content or json.loads(
                        result.content[0].text  # type: ignore[union-attr]
                    )
                    if result.is_error:
                        errors.append(f"{tool}: {payload}")
                    elif tool == "store":
                        stored[number].append(str(payload["id"]))

    with anyio.fail_after(240):
        async with anyio.create_task_group() as tasks:
            for number in range(4):
                tasks.start_soon(agent, number)
    assert errors == []
    ids = {memory_id for ids in stored.values() for memory_id in ids}
    assert len(ids) == 20
    async with http_client(url) as client:
        stats = await ok(client, "stats", {"detailed": True})
    assert stats["total"] == 20  # every write is there


def test_a_non_loopback_bind_without_a_token_is_refused(tmp_path: Path, models_dir: Path) -> None:
    done = subprocess.run(
        [ferrex_command(), "serve", "--http", f"0.0.0.0:{free_port()}"],
        env=environment(tmp_path / "data", models_dir),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "refusing to serve 0.0.0.0 (not a loopback address) without a configured token" in (
        done.stderr
    )
    assert not (tmp_path / "data" / "http-token").exists()


def test_a_generated_token_is_printed_once_and_kept_private(
    tmp_path: Path, models_dir: Path
) -> None:
    data_dir = tmp_path / "data"
    printed: list[str] = []
    for _ in range(2):
        port = free_port()
        process = subprocess.Popen(
            [ferrex_command(), "serve", "--http", f"127.0.0.1:{port}"],
            env=environment(data_dir, models_dir),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_listening(port, process)
        process.terminate()
        _, err = process.communicate(timeout=30)
        printed.append(err)
    token = (data_dir / "http-token").read_text(encoding="utf-8").strip()
    assert oct((data_dir / "http-token").stat().st_mode & 0o777) == "0o600"
    assert token in printed[0] and "generated an HTTP bearer token" in printed[0]
    assert token not in printed[1]
