"""Many clients, one store: two ``ferrex`` servers (two MCP clients, as Claude Desktop and
Claude Code would start them) on the same data dir.

Proves that both answer, that a store through either is recallable through the other at once,
that concurrent calls from both never surface a lock error (or any error), that the data dir
is created private (0700, socket 0600), and that when the first server (the engine that owns
the store) stops - cleanly or killed - the second takes over and keeps answering, calls made
during the takeover included.
"""

from __future__ import annotations

import os
import signal
import stat
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from tests.conftest import call, mcp_client

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def lock_pid(data_dir: Path) -> int:
    return int((data_dir / "ferrex.lock").read_text(encoding="utf-8").strip() or 0)


def assert_no_error(answer: dict[str, Any], what: str) -> None:
    assert "error" not in answer, f"{what}: {answer}"


async def store(client: Client, text: str) -> str:
    answer = await call(client, "store", {"content": text})
    assert_no_error(answer, f"store {text!r}")
    return str(answer["id"])


async def recalls(client: Client, text: str, memory_id: str) -> bool:
    answer = await call(client, "recall", {"query": text, "limit": 5})
    assert_no_error(answer, f"recall {text!r}")
    return memory_id in [r["id"] for r in answer["results"]]


async def burst(first: Client, second: Client, rounds: int) -> list[dict[str, Any]]:
    """Interleaved concurrent writes and reads from both clients."""
    answers: list[dict[str, Any]] = []

    async def worker(client: Client, name: str) -> None:
        for n in range(rounds):
            text = f"{name} wrote note {n}: the {['kettle', 'lantern', 'compass'][n % 3]} #{n}"
            answers.append(await call(client, "store", {"content": text}))
            answers.append(await call(client, "recall", {"query": text, "limit": 3}))
            answers.append(await call(client, "stats", {}))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(worker, first, "desktop")
        tasks.start_soon(worker, second, "code")
    return answers


async def test_two_servers_share_one_store(tmp_path: Path, models_dir: Path) -> None:
    data_dir = tmp_path / "nested" / "data"
    async with mcp_client(data_dir, models_dir, FERREX_LOG="error") as desktop:
        await call(desktop, "stats", {})
        assert stat.S_IMODE(os.stat(data_dir).st_mode) == 0o700
        owner = lock_pid(data_dir)
        async with mcp_client(data_dir, models_dir, FERREX_LOG="error") as code:
            assert lock_pid(data_dir) == owner  # the second one is a peer
            assert stat.S_IMODE(os.stat(data_dir / "ferrex.sock").st_mode) == 0o600
            one = await store(desktop, "Desktop learned that the VPN needs a hardware token")
            two = await store(code, "Code learned that CI caches the pip wheels for a week")
            assert await recalls(code, "VPN hardware token", one)
            assert await recalls(desktop, "CI pip wheel cache", two)
            for answer in await burst(desktop, code, rounds=8):
                assert_no_error(answer, "concurrent call")
            forgot = await call(code, "forget", {"ids": [one]})
            assert forgot["deleted"] == [one]
            assert not await recalls(desktop, "VPN hardware token", one)


@pytest.mark.parametrize("how", ["clean", "sigkill"])
async def test_second_server_takes_over_when_the_engine_stops(
    tmp_path: Path, models_dir: Path, how: str
) -> None:
    data_dir = tmp_path / "data"
    up, release, gone = anyio.Event(), anyio.Event(), anyio.Event()
    kept: dict[str, str] = {}

    async def desktop_session() -> None:
        """The first server: it owns the store (the engine)."""
        async with mcp_client(data_dir, models_dir, FERREX_LOG="error") as desktop:
            kept["id"] = await store(desktop, "The staging database lives in eu-west-1")
            up.set()
            await release.wait()
            if how == "sigkill":
                os.kill(lock_pid(data_dir), signal.SIGKILL)
        gone.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(desktop_session)
        await up.wait()
        owner = lock_pid(data_dir)
        async with mcp_client(data_dir, models_dir, FERREX_LOG="error") as code:
            await call(code, "stats", {})  # the second server is up, as a peer
            assert lock_pid(data_dir) == owner
            release.set()
            await gone.wait()
            # The engine is gone: every call from here on is answered, none with an error.
            started = time.monotonic()
            answers = [await call(code, "stats", {}) for _ in range(3)]
            answers.append(await call(code, "recall", {"query": "staging database", "limit": 3}))
            for answer in answers:
                assert_no_error(answer, f"call right after the engine stopped ({how})")
            assert kept["id"] in [r["id"] for r in answers[-1]["results"]]
            new = await store(code, "After the takeover the second server still stores memories")
            assert await recalls(code, "second server still stores", new)
            assert lock_pid(data_dir) not in (0, owner)
            assert time.monotonic() - started < 30


async def test_each_client_keeps_its_own_default_namespace(
    tmp_path: Path, models_dir: Path
) -> None:
    """A peer forwards calls to the engine process, but its own --namespace still applies."""
    data_dir = tmp_path / "shared"
    async with (
        mcp_client(data_dir, models_dir, "--namespace", "desktop") as first,
        mcp_client(data_dir, models_dir, "--namespace", "code") as second,
    ):
        mine = await store(first, "the desktop client remembers the holiday plan")
        theirs = await store(second, "the code client remembers the build cache fix")
        assert (await call(first, "stats", {}))["total"] == 1
        assert (await call(second, "stats", {}))["total"] == 1
        assert await recalls(first, "holiday plan", mine)
        assert not await recalls(second, "holiday plan", mine)
        assert await recalls(second, "build cache", theirs)
        explicit = await call(second, "recall", {"query": "holiday plan", "namespace": "desktop"})
        assert mine in [r["id"] for r in explicit["results"]]
