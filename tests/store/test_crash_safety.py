"""Crash safety of the dual write (SQLite + journal in one transaction, then the vector index).

A real ``ferrex`` server, driven by the MCP SDK's stdio client, performs a scripted stream of
stores (episodic notes and semantic facts that supersede each other) and forgets, and is killed
with SIGKILL: at random moments (during start-up, replay, embedding, commits, index writes) and,
through the ``FERREX_TEST_PAUSE_AT`` hook, exactly in each phase of the dual write (before the
SQLite commit, after it, after the index write) for both a store and a forget. Every run
restarts the server on the same data dir and proves:

- every store the client saw acknowledged is in SQLite and recallable; every acknowledged forget
  stays gone (from SQLite, from the index, from recall);
- the write in flight at the kill is all-or-nothing, and in the hooked runs it is exactly what
  the phase implies (committed => present after replay; not committed => absent);
- recall never returns a fact SQLite says was superseded (index payloads were rolled forward);
- ``ferrex doctor --json`` (a CLI subprocess) reports SQLite and the index in agreement with no
  journal backlog, and a final direct comparison of SQLite ids and index points agrees.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import sys
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from tests.support.harness import call, ferrex_command, mcp_client
from tests.support.sentences import sentence

from ferrex.core.ids import point_id
from ferrex.store.edge import EdgeIndex
from ferrex.store.sqlite import SqliteStore

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PHASES = ("before_sqlite_commit", "after_sqlite_commit", "after_index_write")
RANDOM_RUNS = int(
    os.environ.get("FERREX_TEST_CRASH_RANDOM_RUNS", "15")
)  # bench/crash_long.py: more
SEED = int(os.environ.get("FERREX_TEST_CRASH_SEED", "20260406"))
VERIFY_FRESH = 15  # recall-checked after every restart (all are checked in SQLite)
VERIFY_OLDER = 8


# =========================================================================== bookkeeping


@dataclass
class Op:
    kind: str  # "store" | "fact" | "forget"
    arguments: dict[str, Any]
    text: str  # what to recall it by (content, or the fact as a sentence)
    target: str | None = None  # the id a forget removes


@dataclass
class Ledger:
    """What the client saw acknowledged, across all runs on the one data dir."""

    present: dict[str, str] = field(default_factory=dict)  # id -> recall text
    forgotten: set[str] = field(default_factory=set)
    unverified: set[str] = field(default_factory=set)  # acked since the last restart
    subjects: dict[str, int] = field(default_factory=dict)  # fact subject -> next port
    acked_ops: int = 0
    in_flight_kinds: list[str] = field(default_factory=list)


@dataclass
class Harness:
    data_dir: Path
    models_dir: Path
    ledger: Ledger
    rng: random.Random
    last_pid: int | None = None
    runs: int = 0
    phase_runs: list[tuple[str, str]] = field(default_factory=list)

    @property
    def db_path(self) -> Path:
        return self.data_dir / "ferrex.db"


@contextmanager
def read_only(db_path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only look at SQLite (never a writer next to the server)."""
    with closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=30)) as conn:
        yield conn


def sqlite_ids(db_path: Path) -> set[str]:
    with read_only(db_path) as conn:
        return {row[0] for row in conn.execute("SELECT id FROM memories")}


def ids_with_content(db_path: Path, text: str) -> set[str]:
    with read_only(db_path) as conn:
        rows = conn.execute("SELECT id FROM memories WHERE content = ?", (text,)).fetchall()
    return {row[0] for row in rows}


def fact_ids(db_path: Path, subject: str, obj: str) -> set[str]:
    with read_only(db_path) as conn:
        rows = conn.execute(
            "SELECT id FROM memories WHERE subject = ? AND object = ?", (subject, obj)
        ).fetchall()
    return {row[0] for row in rows}


def invalidated_ids(db_path: Path) -> set[str]:
    with read_only(db_path) as conn:
        rows = conn.execute("SELECT id FROM memories WHERE t_invalid IS NOT NULL").fetchall()
    return {row[0] for row in rows}


def pending_journal(db_path: Path) -> list[tuple[str, str]]:
    with read_only(db_path) as conn:
        return [(r[0], r[1]) for r in conn.execute("SELECT op, memory_id FROM journal")]


# =========================================================================== the script


def next_op(harness: Harness, tag: str) -> Op:
    ledger, rng = harness.ledger, harness.rng
    roll = rng.random()
    if roll < 0.2 and ledger.present:
        target = rng.choice(sorted(ledger.present))
        return Op("forget", {"ids": [target]}, ledger.present[target], target)
    if roll < 0.4:
        subject = f"crash-service-{rng.randrange(6)}"
        port = ledger.subjects.get(subject, 8000) + rng.randrange(1, 50)
        ledger.subjects[subject] = port
        arguments = {"subject": subject, "predicate": "listens on port", "object": str(port)}
        return Op("fact", arguments, f"{subject} listens on port {port}")
    text = sentence(rng, tag)
    return Op("store", {"content": text}, text)


def acknowledge(ledger: Ledger, op: Op, reply: dict[str, Any]) -> None:
    """Record what the server acknowledged (its reply arrived, so SQLite committed it)."""
    assert "error" not in reply or reply["error"]["code"] in {"duplicate", "not_found"}, reply
    if "error" in reply:
        return
    ledger.acked_ops += 1
    if op.kind == "forget":
        assert op.target is not None
        if op.target in reply["deleted"]:
            ledger.present.pop(op.target, None)
            ledger.unverified.discard(op.target)
            ledger.forgotten.add(op.target)
        return
    if reply.get("status") in {"stored", "superseded", "historical", "contradiction"}:
        ledger.present[reply["id"]] = op.text
        ledger.unverified.add(reply["id"])


# =========================================================================== the child


def engine_pid(harness: Harness) -> int:
    """The pid of the server process that owns the data dir (it writes it into ferrex.lock)."""
    lock = harness.data_dir / "ferrex.lock"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            pid = int(lock.read_text(encoding="utf-8").strip() or 0)
        except (OSError, ValueError):
            pid = 0
        if pid and pid != harness.last_pid and _is_ferrex(pid):
            harness.last_pid = pid
            return pid
        time.sleep(0.02)
    raise AssertionError("the ferrex child never took the data-dir lock")


def _is_ferrex(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"ferrex" in cmdline


def kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _is_ferrex(pid) and time.monotonic() < deadline:
        time.sleep(0.01)


async def wait_for_pause(marker: Path, timeout: float = 20.0) -> str:
    with anyio.fail_after(timeout):
        while not marker.exists() or not marker.read_text(encoding="utf-8"):
            await anyio.sleep(0.01)
    return marker.read_text(encoding="utf-8")


# =========================================================================== verification


async def doctor_json(harness: Harness) -> dict[str, Any]:
    """``ferrex doctor --json`` as a CLI subprocess (a peer of the running engine)."""
    env = {
        **os.environ,
        "FERREX_HOME": str(harness.data_dir),
        "FERREX_MODELS_DIR": str(harness.models_dir),
        "FERREX_OFFLINE": "1",
        "FERREX_LOG": "error",
    }
    done = await anyio.run_process(
        [ferrex_command(), "--model-tier", "small", "doctor", "--json"], env=env, check=False
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return json.loads(done.stdout)


async def recall_ids(client: Client, query: str, **extra: Any) -> list[str]:
    reply = await call(client, "recall", {"query": query, "limit": 10, **extra})
    assert "error" not in reply, reply
    return [item["id"] for item in reply["results"]]


async def assert_recallable(client: Client, ledger: Ledger, ids: list[str]) -> None:
    """Each id comes back when recalled by its own text (a few calls in flight at once)."""
    lost: list[str] = []

    async def check(batch: list[str]) -> None:
        for memory_id in batch:
            found = await recall_ids(client, ledger.present[memory_id], include_invalidated=True)
            if memory_id not in found:
                lost.append(memory_id)

    async with anyio.create_task_group() as tasks:
        for lane in range(4):
            tasks.start_soon(check, ids[lane::4])
    assert not lost, f"acknowledged memories not recallable after restart: {sorted(lost)}"


async def verify_after_restart(client: Client, harness: Harness) -> None:
    """The restarted server replays the journal; then every invariant must hold."""
    ledger = harness.ledger
    # The first recall makes the server ready (model, journal replay) before anything else.
    await recall_ids(client, "crash log")
    stored = sqlite_ids(harness.db_path)
    missing = set(ledger.present) - stored
    assert not missing, f"acknowledged stores lost after SIGKILL: {sorted(missing)}"
    resurrected = ledger.forgotten & stored
    assert not resurrected, f"acknowledged forgets came back: {sorted(resurrected)}"
    reports: list[dict[str, Any]] = []

    async def run_doctor() -> None:
        reports.append(await doctor_json(harness))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(run_doctor)  # a CLI subprocess, concurrently with the recall checks
        fresh = sorted(ledger.unverified & set(ledger.present))  # stored, not since forgotten
        older = sorted(set(ledger.present) - ledger.unverified)
        sample = harness.rng.sample(fresh, min(VERIFY_FRESH, len(fresh)))
        sample += harness.rng.sample(older, min(VERIFY_OLDER, len(older)))
        await assert_recallable(client, ledger, sample)
        ledger.unverified.clear()
        invalid = invalidated_ids(harness.db_path)
        for subject in sorted(ledger.subjects):
            current = await recall_ids(client, f"{subject} listens on port", types=["semantic"])
            assert not invalid & set(current), "recall returned a fact SQLite says was superseded"
    report = reports[0]
    assert report["in_agreement"] is True, report
    assert report["journal_backlog"] == 0, report
    assert report["sqlite"]["memories"] == len(stored) == report["index"]["memories"], report
    assert report["orphans_in_index"]["count"] == 0
    assert report["missing_in_index"]["count"] == 0


async def check_in_flight(client: Client, harness: Harness, op: Op | None) -> None:
    """The write cut by the kill is all-or-nothing; adopt it when it made it to SQLite."""
    if op is None:
        return
    harness.ledger.in_flight_kinds.append(op.kind)
    if op.kind == "forget":
        assert op.target is not None
        if op.target in sqlite_ids(harness.db_path):
            found = await recall_ids(client, op.text, include_invalidated=True)
            assert op.target in found, "a forget cut by the kill left the memory half-deleted"
        else:
            harness.ledger.present.pop(op.target, None)
            harness.ledger.forgotten.add(op.target)
        return
    if op.kind == "store":
        landed = ids_with_content(harness.db_path, op.text)
    else:
        landed = fact_ids(harness.db_path, op.arguments["subject"], op.arguments["object"])
    for memory_id in landed:
        found = await recall_ids(client, op.text, include_invalidated=True)
        assert memory_id in found, "a write cut by the kill is in SQLite but not recallable"
        harness.ledger.present[memory_id] = op.text


# =========================================================================== one run


async def drive_until_killed(client: Client, harness: Harness, delay: float, run: int) -> Op | None:
    """Issue scripted writes as fast as the server answers; SIGKILL it after ``delay`` s."""
    pid = engine_pid(harness)
    in_flight: Op | None = None
    killed = anyio.Event()

    async def killer() -> None:
        await anyio.sleep(delay)
        kill(pid)
        killed.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(killer)
        for step in range(10_000):
            op = next_op(harness, f"r{run}-{step}")
            in_flight = op
            try:
                reply = await call(
                    client, "store" if op.kind != "forget" else "forget", op.arguments
                )
            except Exception:
                assert killed.is_set(), "the server died before the test killed it"
                break
            acknowledge(harness.ledger, op, reply)
            in_flight = None
            if killed.is_set():
                break
    return in_flight


async def hooked_run(client: Client, harness: Harness, phase: str, kind: str) -> Op:
    """Write once with the pause hook armed; SIGKILL the server while it waits in ``phase``."""
    pid = engine_pid(harness)
    marker = harness.data_dir.parent / "paused"
    if kind == "forget":
        assert harness.ledger.present, "no acknowledged memory to forget yet"
        target = harness.rng.choice(sorted(harness.ledger.present))
        op = Op("forget", {"ids": [target]}, harness.ledger.present[target], target)
    else:
        text = sentence(harness.rng, f"hook-{phase}")
        op = Op("store", {"content": text}, text)
    async with anyio.create_task_group() as tasks:

        async def write() -> None:
            with pytest.raises(Exception):  # noqa: B017 - the connection dies with the server
                await call(client, kind, op.arguments)

        tasks.start_soon(write)
        assert await wait_for_pause(marker) == phase
        kill(pid)
    harness.phase_runs.append((phase, kind))
    return op


def expect_phase_outcome(
    harness: Harness, phase: str, op: Op, journal: list[tuple[str, str]]
) -> None:
    """Right after the kill (before any restart): SQLite holds exactly what was committed."""
    committed = phase != "before_sqlite_commit"
    if op.kind == "store":
        present = ids_with_content(harness.db_path, op.text)
        assert bool(present) is committed, (phase, present)
        if phase == "after_sqlite_commit":
            assert any(o == "index" and mid in present for o, mid in journal), journal
    else:
        assert op.target is not None
        gone = op.target not in sqlite_ids(harness.db_path)
        assert gone is committed, phase
        if phase == "after_sqlite_commit":
            assert ("delete", op.target) in journal, journal


# =========================================================================== the test


def run_plan(rng: random.Random) -> list[tuple[str, Any]]:
    """Random-delay runs with the six hooked runs spread among them (never first: the hooked
    forgets need acknowledged memories, so the first two runs write for at least 0.8 s)."""
    plan: list[tuple[str, Any]] = [
        ("random", rng.uniform(0.8 if run < 2 else 0.1, 1.0)) for run in range(RANDOM_RUNS)
    ]
    hooked = [("hook", (phase, kind)) for phase in PHASES for kind in ("store", "forget")]
    rng.shuffle(hooked)
    for position, item in zip(range(2, 2 * len(hooked) + 2, 2), hooked, strict=True):
        plan.insert(position, item)
    return plan


async def test_sigkill_at_random_points_and_in_every_phase_loses_nothing(
    tmp_path: Path, models_dir: Path
) -> None:
    started = time.monotonic()
    harness = Harness(tmp_path / "data", models_dir, Ledger(), random.Random(SEED))
    plan = run_plan(harness.rng)
    in_flight: Op | None = None
    for number, (kind, detail) in enumerate(plan):
        hook_env = {}
        if kind == "hook":
            phase, _ = detail
            hook_env = {
                "FERREX_TEST_PAUSE_AT": phase,
                "FERREX_TEST_PAUSE_FILE": str(tmp_path / "paused"),
            }
            (tmp_path / "paused").unlink(missing_ok=True)
        async with mcp_client(
            harness.data_dir, harness.models_dir, FERREX_LOG="error", **hook_env
        ) as client:
            if number:
                await check_in_flight(client, harness, in_flight)
                await verify_after_restart(client, harness)
            if kind == "random":
                in_flight = await drive_until_killed(client, harness, detail, number)
            else:
                phase, write = detail
                op = await hooked_run(client, harness, phase, write)
                journal = pending_journal(harness.db_path)
                expect_phase_outcome(harness, phase, op, journal)
                in_flight = op
        harness.runs += 1
    async with mcp_client(harness.data_dir, harness.models_dir, FERREX_LOG="error") as client:
        await check_in_flight(client, harness, in_flight)
        await verify_after_restart(client, harness)
        await assert_recallable(client, harness.ledger, sorted(harness.ledger.present))
    assert_index_matches_sqlite(harness)
    elapsed = time.monotonic() - started
    ledger = harness.ledger
    assert harness.runs >= 20
    assert sorted(harness.phase_runs) == sorted(
        (phase, kind) for phase in PHASES for kind in ("store", "forget")
    )
    assert ledger.acked_ops > 100 and ledger.forgotten and ledger.subjects
    print(
        f"\ncrash harness: {harness.runs} kills, {ledger.acked_ops} acknowledged writes, "
        f"{len(ledger.present)} memories, {len(ledger.forgotten)} forgotten, "
        f"in flight at kill: {ledger.in_flight_kinds}, {elapsed:.1f}s",
        file=sys.stderr,
    )


def assert_index_matches_sqlite(harness: Harness) -> None:
    """With no server running, compare SQLite and the index directly: same ids, same points."""
    meta = SqliteStore(harness.db_path)
    index = EdgeIndex(harness.data_dir / "index")
    try:
        expected = meta.all_memory_ids()
        actual = index.points_by_memory()
        assert set(expected) == set(actual)
        for memory_id, chunks in expected.items():
            assert sorted(actual[memory_id]) == sorted(
                point_id(memory_id, i) for i in range(chunks)
            )
        assert meta.journal_backlog() == 0
        assert set(harness.ledger.present) <= set(expected)
        assert not harness.ledger.forgotten & set(expected)
    finally:
        index.close()
        meta.close()
