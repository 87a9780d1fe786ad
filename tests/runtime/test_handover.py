"""No call fails because another ferrex process on the data dir exited or died (issue 37.1).

Real ``ferrex`` servers driven by the MCP SDK's stdio client on one data dir:

- clients that stop at staggered times (the engine that owns the store first) while the
  others keep storing and recalling: no call fails, every acknowledged store is there exactly
  once, recallable;
- the engine SIGKILLed at deterministic points of a write a peer forwarded (through the
  test-only ``FERREX_TEST_PAUSE_AT`` hook): before the SQLite commit, after it and before the
  index write, after the write and before the answer. The peer takes over and retries; the
  agent gets one answer, never an error, a duplicate refusal or a second copy: exactly one
  memory, with the id the agent was given (the first attempt's, when it had committed).
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from tests.support.harness import call, logged_client, mcp_client
from tests.support.sentences import sentence

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def lock_pid(data_dir: Path) -> int:
    return int((data_dir / "ferrex.lock").read_text(encoding="utf-8").strip() or 0)


def rows(data_dir: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(f"file:{data_dir / 'ferrex.db'}?mode=ro", uri=True)) as db:
        return db.execute(sql, params).fetchall()


def copies(data_dir: Path, content: str) -> list[str]:
    """The ids of the memories holding exactly ``content`` (one expected, never two)."""
    return [r[0] for r in rows(data_dir, "SELECT id FROM memories WHERE content = ?", (content,))]


async def recalled(client: Client, text: str, memory_id: str) -> bool:
    answer = await call(client, "recall", {"query": text, "limit": 5})
    assert "error" not in answer, answer
    return memory_id in [r["id"] for r in answer["results"]]


async def wait_for(path: Path, seconds: float) -> None:
    with anyio.fail_after(seconds):
        while not path.exists():
            await anyio.sleep(0.02)


# =========================================================================== staggered exits


@pytest.mark.parametrize("how", ["stdin", "sigterm"])
async def test_clients_stopping_at_staggered_times_fail_no_call(
    tmp_path: Path, models_dir: Path, how: str
) -> None:
    """Four clients, each its own ferrex, store + recall in a loop; the first (the engine)
    starts its 3 pairs once the others work and stops, the next stop after 6 and 9 pairs while
    the others keep working; the last one works until the end. Every call is answered without
    an error; every acknowledged store is in the store exactly once, with the id it was
    acknowledged with, and recallable; the store was handed over (logged), no traceback.
    ``how`` the engine's process is stopped: its client closes stdin (the client is done), or
    it gets SIGTERM (as a client does 2 s later, or the system at shutdown)."""
    data_dir = tmp_path / "data"
    log = tmp_path / "ferrex.log"
    acknowledged: list[tuple[str, str]] = []
    failures: list[str] = []
    engine_up = anyio.Event()
    working = [anyio.Event() for _ in range(4)]

    async def agent(number: int, pairs: int) -> None:
        rng = random.Random(number)
        async with logged_client(data_dir, models_dir, log, FERREX_LOG="info") as client:
            await call(client, "stats", {})
            if number == 0:
                engine = lock_pid(data_dir)
                engine_up.set()  # the engine is up: the others join it as peers
                for other in working[1:]:
                    await other.wait()
            for n in range(pairs):
                text = sentence(rng, f"client {number} note {n}")
                answer = await call(client, "store", {"content": text})
                working[number].set()
                if "error" in answer:
                    failures.append(f"client {number} store {n}: {answer}")
                    continue
                acknowledged.append((answer["id"], text))
                reply = await call(client, "recall", {"query": text, "limit": 3})
                if "error" in reply:
                    failures.append(f"client {number} recall {n}: {reply}")
            if number == 0 and how == "sigterm":
                assert lock_pid(data_dir) == engine
                os.kill(engine, signal.SIGTERM)
                with anyio.fail_after(30):
                    while lock_pid(data_dir) == engine:  # until another process took over
                        await anyio.sleep(0.05)
        # leaving the block: stdin closes, the process exits (the owner hands the store over)

    with anyio.fail_after(300):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(agent, 0, 3)
            await engine_up.wait()
            for number, pairs in ((1, 6), (2, 9), (3, 14)):
                tasks.start_soon(agent, number, pairs)
    assert failures == []
    text = log.read_text(encoding="utf-8")
    assert "took the store over" in text and "Traceback" not in text
    assert len(acknowledged) == 3 + 6 + 9 + 14
    for memory_id, text in acknowledged:
        assert copies(data_dir, text) == [memory_id], text  # 0 lost, 0 doubles
    async with mcp_client(data_dir, models_dir, FERREX_LOG="error") as later:
        for memory_id, text in acknowledged:
            assert await recalled(later, text, memory_id), text


# =========================================================================== kills mid-call

Planned = Callable[[list[str]], tuple[str, dict[str, Any]]]


async def killed_mid_call(
    tmp_path: Path, models_dir: Path, phase: str, prepare: list[str], planned: Planned
) -> tuple[dict[str, Any], list[str], dict[str, Any]]:
    """Store ``prepare`` (through an engine without the hook: their ids), then make the call
    ``planned(ids)`` gives through a peer while the engine process, started with
    ``FERREX_TEST_PAUSE_AT=phase``, owns the store; SIGKILL the engine when the forwarded call
    reaches ``phase``. Returns the answer the peer's agent got, the prepared ids, and what the
    peer answers afterwards (stats; recalls of the stored or prepared texts; the same store
    made again as a new call)."""
    data_dir, marker = tmp_path / "data", tmp_path / "paused"
    prepared: list[str] = []
    if prepare:
        async with mcp_client(data_dir, models_dir, FERREX_LOG="error") as first:
            for text in prepare:
                answer = await call(first, "store", {"content": text})
                assert "error" not in answer, answer
                prepared.append(answer["id"])
    tool, arguments = planned(prepared)
    hooked = {"FERREX_TEST_PAUSE_AT": phase, "FERREX_TEST_PAUSE_FILE": str(marker)}
    answers: list[dict[str, Any]] = []
    after: dict[str, Any] = {}
    with anyio.fail_after(180):
        async with mcp_client(data_dir, models_dir, FERREX_LOG="error", **hooked) as engine:
            await call(engine, "stats", {})  # the hooked process owns the store
            owner = lock_pid(data_dir)
            async with mcp_client(data_dir, models_dir, FERREX_LOG="error") as peer:
                await call(peer, "stats", {})
                assert lock_pid(data_dir) == owner  # a peer: its writes go over the link

                async def forwarded() -> None:
                    answers.append(await call(peer, tool, arguments))

                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(forwarded)
                    await wait_for(marker, 60)
                    assert marker.read_text(encoding="utf-8") == phase
                    os.kill(owner, signal.SIGKILL)
                assert lock_pid(data_dir) not in (0, owner)  # the peer took over
                after["stats"] = await call(peer, "stats", {})
                listed = (await peer.list_tools()).model_dump_json()
                after["tools_mention_a_key"] = "idempotency" in listed or "_key" in listed
                if tool == "store" and "id" in answers[0]:
                    text = str(arguments["content"])
                    after["recalled"] = await recalled(peer, text, answers[0]["id"])
                    after["again"] = await call(peer, "store", {"content": text})
                else:
                    after["recalled"] = [
                        await recalled(peer, text, memory_id)
                        for memory_id, text in zip(prepared, prepare, strict=True)
                    ]
    return answers[0], prepared, after


STORE_PHASES = ("before_sqlite_commit", "after_sqlite_commit", "after_index_write", "before_answer")


@pytest.mark.parametrize("phase", STORE_PHASES)
async def test_a_store_survives_the_engine_killed_mid_call(
    tmp_path: Path, models_dir: Path, phase: str
) -> None:
    """The engine dies with a forwarded store at ``phase``: the agent gets the store's answer
    (never an error or a duplicate refusal), and the memory exists exactly once, with that id,
    recallable; a new store of the same text afterwards is refused as its duplicate."""
    data_dir = tmp_path / "data"
    text = f"the release checklist lives in the wiki (killed {phase})"
    answer, _, after = await killed_mid_call(
        tmp_path, models_dir, phase, [], lambda _: ("store", {"content": text})
    )
    assert "error" not in answer, answer
    assert answer["status"] == "stored", answer
    assert copies(data_dir, text) == [answer["id"]]  # 0 lost, 0 doubles
    assert after["recalled"]
    assert after["stats"]["total"] == 1
    assert after["again"]["error"]["code"] == "duplicate"  # a new call is a new store
    assert after["again"]["error"]["existing_id"] == answer["id"]
    # One key, recorded with the write (by the engine that died when it had committed, else
    # by the retry); nothing of it reaches the agent.
    keys = rows(data_dir, "SELECT op, namespace, answer FROM call_keys")
    assert len(keys) == 1 and keys[0][:2] == ("store", "default"), keys
    assert answer["id"] in keys[0][2]
    assert not any("key" in name or "idempotency" in name for name in answer)
    assert after["tools_mention_a_key"] is False  # tools/list: no tool takes a key
    if phase != "before_sqlite_commit":  # written once, by the engine that died
        audit = rows(data_dir, "SELECT memory_id FROM audit WHERE action = 'store'")
        assert audit == [(answer["id"],)]


@pytest.mark.parametrize("phase", ["after_sqlite_commit", "before_answer"])
async def test_a_forget_survives_the_engine_killed_mid_call(
    tmp_path: Path, models_dir: Path, phase: str
) -> None:
    """A forwarded forget whose engine dies once it is committed answers ``deleted`` (the first
    answer), not ``not_found`` (what forgetting again would say); the memory stays gone and the
    other one stays."""
    data_dir = tmp_path / "data"
    texts = ["the old VPN endpoint is vpn1.example.org", "the office wifi network is called Atlas"]
    answer, prepared, after = await killed_mid_call(
        tmp_path, models_dir, phase, texts, lambda ids: ("forget", {"ids": [ids[0]]})
    )
    assert "error" not in answer, answer
    assert answer["deleted"] == [prepared[0]] and answer["not_found"] == [], answer
    assert copies(data_dir, texts[0]) == [] and copies(data_dir, texts[1]) == [prepared[1]]
    assert after["recalled"] == [False, True]
    assert after["stats"]["total"] == 1
