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
import sqlite3
import stat
import time
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from tests.support.harness import call, logged_client, mcp_client
from tests.support.sentences import FINDINGS

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


MINILM = "sentence-transformers/all-MiniLM-L6-v2"
MID = "BAAI/bge-small-en-v1.5"


async def refusal(client: Client, tool: str, arguments: dict[str, Any]) -> str:
    """The ``model_mismatch`` message a tool call is answered with (within 30 s)."""
    with anyio.fail_after(30):
        answer = await call(client, tool, arguments)
    assert answer.get("error", {}).get("code") == "model_mismatch", answer
    return str(answer["error"]["message"])


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


async def hold_the_engine(
    data_dir: Path,
    models_dir: Path,
    up: anyio.Event,
    release: anyio.Event,
    gone: anyio.Event,
) -> None:
    """Own the store (pinned with MiniLM by one memory) until ``release``; ``up`` when it
    serves, ``gone`` once it has exited."""
    async with mcp_client(data_dir, models_dir, FERREX_LOG="error") as owner:
        await store(owner, "pinned with MiniLM: the backup runs at 02:00")
        up.set()
        await release.wait()
    gone.set()


async def test_a_client_configured_for_another_model_is_refused_as_if_alone(
    tmp_path: Path, models_dir: Path
) -> None:
    """Joining a running engine must not let in a process that the store itself would refuse:
    same error, same message, whether the engine process is running or not, and the refused
    process stays up (answering with the refusal) when the engine exits."""
    data_dir = tmp_path / "data"
    async with mcp_client(data_dir, models_dir, FERREX_LOG="error") as owner:
        await store(owner, "pinned with MiniLM: the backup runs at 02:00")
    async with mcp_client(data_dir, models_dir, "--model-tier", "mid") as alone:
        expected = await refusal(alone, "store", {"content": "x"})
    assert MINILM in expected and MID in expected

    log = tmp_path / "peer.log"
    with anyio.fail_after(60):
        async with mcp_client(data_dir, models_dir, FERREX_LOG="error") as owner:
            await call(owner, "stats", {})
            async with logged_client(data_dir, models_dir, log, "--model-tier", "mid") as peer:
                assert await refusal(peer, "store", {"content": "peer wrote this"}) == expected
                assert await refusal(peer, "recall", {"query": "backup"}) == expected
            stats = await call(owner, "stats", {})
            assert stats["total"] == 1  # nothing was written through the refused client
    assert "Traceback" not in log.read_text(encoding="utf-8")


async def test_the_refused_client_survives_the_engine_exit(
    tmp_path: Path, models_dir: Path
) -> None:
    """The refused client outlives the engine: it answers with the refusal, never takes over
    the store with the wrong model, and never ends its session."""
    data_dir = tmp_path / "data"
    log = tmp_path / "peer.log"
    up, gone = anyio.Event(), anyio.Event()
    release = anyio.Event()

    owner_session = partial(hold_the_engine, data_dir, models_dir, up, release, gone)

    with anyio.fail_after(90):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(owner_session)
            await up.wait()
            async with logged_client(data_dir, models_dir, log, "--model-tier", "mid") as peer:
                first = await refusal(peer, "stats", {})
                release.set()
                await gone.wait()
                assert await refusal(peer, "store", {"content": "after the owner left"}) == first
                assert await refusal(peer, "stats", {}) == first
    text = log.read_text(encoding="utf-8")
    assert "Traceback" not in text and "ExceptionGroup" not in text
    async with mcp_client(data_dir, models_dir) as later:  # the store is intact and free
        assert (await call(later, "stats", {}))["total"] == 1


async def test_a_failed_takeover_keeps_the_process_up(tmp_path: Path, models_dir: Path) -> None:
    """If becoming the engine fails (here: the store was re-pinned to another model while the
    peer waited), the peer keeps its session and answers every call with that error, logged
    once as one structured line - no traceback, no dead session."""
    data_dir = tmp_path / "data"
    log = tmp_path / "peer.log"
    up, gone, release = anyio.Event(), anyio.Event(), anyio.Event()

    owner_session = partial(hold_the_engine, data_dir, models_dir, up, release, gone)

    with anyio.fail_after(90):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(owner_session)
            await up.wait()
            async with logged_client(
                data_dir, models_dir, log, "--model-tier", "small", FERREX_LOG="warning"
            ) as peer:
                assert_no_error(await call(peer, "stats", {}), "peer before the takeover")
                with sqlite3.connect(data_dir / "ferrex.db") as db:  # another model's pin
                    db.execute("UPDATE meta SET value = ? WHERE key = 'embedding_model'", (MID,))
                release.set()
                await gone.wait()
                for tool, arguments in (("stats", {}), ("recall", {"query": "backup"})):
                    message = await refusal(peer, tool, arguments)
                    assert MID in message and MINILM in message
    text = log.read_text(encoding="utf-8")
    assert "Traceback" not in text and "ExceptionGroup" not in text
    assert text.count("taking over the ferrex engine failed") == 1, text
    assert not (data_dir / "ferrex.sock").exists()  # it did not serve the store


async def test_settings_the_engine_overrides_are_named_on_joining(
    tmp_path: Path, models_dir: Path
) -> None:
    """A client's per-engine settings cannot apply through another process's engine: it says
    so on its stderr, naming them; its namespace still applies (per call)."""
    data_dir = tmp_path / "data"
    log = tmp_path / "peer.log"
    with anyio.fail_after(60):
        async with mcp_client(data_dir, models_dir, FERREX_LOG="error") as owner:
            await call(owner, "stats", {})
            async with logged_client(
                data_dir,
                models_dir,
                log,
                "--no-rerank",
                "--namespace",
                "mine",
                FERREX_LOG="warning",
                FERREX_THREADS="1",
            ) as peer:
                answer = await call(peer, "store", {"content": "the peer's own namespace"})
                assert_no_error(answer, "peer store")
                assert (await call(owner, "stats", {}))["total"] == 0
                assert (await call(owner, "stats", {"namespace": "mine"}))["total"] == 1
    lines = [line for line in log.read_text(encoding="utf-8").splitlines() if "overridden" in line]
    assert len(lines) == 1, lines
    assert "'rerank'" in lines[0] and "'threads'" in lines[0]
    assert "namespace" not in lines[0] and "model_tier" not in lines[0]


async def test_four_clients_mixed_calls_no_errors_no_lost_writes(
    tmp_path: Path, models_dir: Path
) -> None:
    """Four ferrex processes on one store (one engine, three peers over the engine socket),
    each storing, recalling, reading stats and forgetting concurrently: no call errs and every
    acknowledged write is there at the end (and every forgotten one gone)."""
    data_dir = tmp_path / "data"
    topics = FINDINGS[:16]
    kept: list[tuple[str, str]] = []
    forgotten: list[tuple[str, str]] = []
    failures: list[str] = []

    async def agent(client: Client, number: int) -> None:
        mine = topics[number * 4 : number * 4 + 4]
        for n, text in enumerate(mine):
            answer = await call(client, "store", {"content": text})
            if "error" in answer:
                failures.append(f"store: {answer}")
                continue
            for tool, arguments in (
                ("recall", {"query": topics[(number * 4 + n + 5) % 16], "limit": 3}),
                ("stats", {}),
            ):
                reply = await call(client, tool, arguments)
                if "error" in reply:
                    failures.append(f"{tool}: {reply}")
            if n == 3:  # each agent forgets its last memory
                reply = await call(client, "forget", {"ids": [answer["id"]]})
                if reply.get("deleted") != [answer["id"]]:
                    failures.append(f"forget: {reply}")
                forgotten.append((answer["id"], text))
            else:
                kept.append((answer["id"], text))

    with anyio.fail_after(240):
        async with mcp_client(data_dir, models_dir, FERREX_LOG="error") as first:
            await call(first, "stats", {})  # the engine is up: the others join as peers
            async with (
                mcp_client(data_dir, models_dir, FERREX_LOG="error") as second,
                mcp_client(data_dir, models_dir, FERREX_LOG="error") as third,
                mcp_client(data_dir, models_dir, FERREX_LOG="error") as fourth,
            ):
                async with anyio.create_task_group() as tasks:
                    for number, client in enumerate((first, second, third, fourth)):
                        tasks.start_soon(agent, client, number)
                assert failures == []
                stats = await call(fourth, "stats", {"detailed": True})
                assert stats["total"] == len(kept) == 12
    async with mcp_client(data_dir, models_dir, FERREX_LOG="error") as later:  # after restart
        for memory_id, text in kept:
            assert await recalls(later, text, memory_id), text
        for memory_id, text in forgotten:
            assert not await recalls(later, text, memory_id), text
