"""The managed Qdrant sidecar: binary discovery, the written config (loopback, API key, storage
under the data dir), start with readiness backoff, PID file, reuse by a later owner, stale PID
cleanup, stop (SIGTERM, then SIGKILL), and the process-level rule that the last ferrex process
on a data dir stops it.

No Qdrant binary can be installed here: the lifecycle runs against ``tests/support/
qdrant_standin.py`` (a stand-in that serves Qdrant's health endpoints and checks the key), and
the same lifecycle tests run against a real ``qdrant`` when one is on PATH (skipped visibly
otherwise), together with an MCP store/recall through it. The sidecar's data path is the
qdrant-client adapter, tested on ``QdrantClient(":memory:")`` in test_qdrant_adapter.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from tests.support.harness import ferrex_command, make_settings
from tests.support.paths import SUPPORT

from ferrex.bootstrap import INDEX_MODE, choose_index_mode
from ferrex.core.errors import FerrexError
from ferrex.runtime.sidecar import HOST, Binary, Sidecar, connect_client, find_binary, pid_alive
from ferrex.store.sqlite import SqliteStore

STANDIN = SUPPORT / "qdrant_standin.py"
REAL_QDRANT = shutil.which("qdrant")


def write_standin(directory: Path) -> Path:
    """An executable named ``qdrant`` that runs the stand-in (what ferrex would find)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "qdrant"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n', encoding="utf-8")
    path.chmod(0o755)
    return path


@pytest.fixture(params=["stand-in", "real qdrant"])
def binary(request: pytest.FixtureRequest, tmp_path: Path) -> Binary:
    if request.param == "real qdrant":
        if REAL_QDRANT is None:
            pytest.skip("no qdrant binary on PATH: the lifecycle ran against the stand-in only")
        return Binary(Path(REAL_QDRANT), "PATH")
    return Binary(write_standin(tmp_path / "standin-bin"), "--qdrant-bin / FERREX_QDRANT_BIN")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def sidecars() -> Iterator[list[Sidecar]]:
    """Sidecars a test started; each is stopped at the end whatever happened."""
    made: list[Sidecar] = []
    yield made
    for sidecar in made:
        sidecar.stop()


def start(data_dir: Path, binary: Binary, made: list[Sidecar], **kwargs: float) -> Sidecar:
    sidecar = Sidecar(data_dir, binary, **kwargs)
    made.append(sidecar)
    sidecar.ensure_running()
    return sidecar


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --------------------------------------------------------------------------- lifecycle


def test_start_writes_a_loopback_config_with_a_private_key(
    data_dir: Path, binary: Binary, sidecars: list[Sidecar]
) -> None:
    sidecar = start(data_dir, binary, sidecars)
    endpoint = sidecar.endpoint
    assert endpoint is not None and not endpoint.reused
    config = yaml.safe_load(sidecar.config_path.read_text(encoding="utf-8"))
    key = sidecar.key_path.read_text(encoding="utf-8").strip()
    assert config["service"]["host"] == "127.0.0.1"
    assert config["service"]["api_key"] == key == endpoint.api_key and len(key) >= 32
    assert config["service"]["http_port"] == endpoint.http_port
    assert config["service"]["grpc_port"] == endpoint.grpc_port != endpoint.http_port
    assert Path(config["storage"]["storage_path"]) == data_dir / "qdrant-data"
    assert config["telemetry_disabled"] is True
    assert mode_of(sidecar.key_path) == 0o600
    assert mode_of(sidecar.config_path) == 0o600
    # Ready (health checked), recorded, reachable only with the key.
    assert sidecar.ready(endpoint.http_port)
    assert sidecar.answers_with_our_key(endpoint.http_port, key)
    assert not sidecar.answers_with_our_key(endpoint.http_port, "not-the-key")
    record = json.loads(sidecar.pid_path.read_text(encoding="utf-8"))
    assert record["pid"] == endpoint.pid and pid_alive(endpoint.pid)
    assert (data_dir / "qdrant-data").is_dir()


def test_a_later_owner_reuses_the_live_sidecar_and_stop_ends_it(
    data_dir: Path, binary: Binary, sidecars: list[Sidecar]
) -> None:
    first = start(data_dir, binary, sidecars)
    assert first.endpoint is not None
    pid, key = first.endpoint.pid, first.endpoint.api_key
    # The next owner (a new Sidecar object, as after a takeover) finds it by its PID file.
    second = start(data_dir, binary, sidecars)
    assert second.endpoint is not None
    assert second.endpoint.reused and second.endpoint.pid == pid
    assert second.endpoint.api_key == key  # the key is kept, not regenerated
    assert second.stop()
    assert not pid_alive(pid)
    assert not second.pid_path.exists()
    # A third start is a fresh sidecar with the same key on new ports.
    third = start(data_dir, binary, sidecars)
    assert third.endpoint is not None and not third.endpoint.reused
    assert third.endpoint.pid != pid and third.endpoint.api_key == key


def test_a_stale_pid_file_is_removed_and_a_new_sidecar_started(
    data_dir: Path, binary: Binary, sidecars: list[Sidecar]
) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = {"pid": gone.pid, "http_port": 1, "grpc_port": 2}
    (data_dir / "qdrant.pid").write_text(json.dumps(stale), encoding="utf-8")
    sidecar = start(data_dir, binary, sidecars)
    assert sidecar.endpoint is not None and not sidecar.endpoint.reused
    record = json.loads(sidecar.pid_path.read_text(encoding="utf-8"))
    assert record["pid"] == sidecar.endpoint.pid != gone.pid


def test_a_pid_file_naming_a_foreign_live_process_never_kills_it(
    data_dir: Path, binary: Binary, sidecars: list[Sidecar]
) -> None:
    foreign = subprocess.Popen(["sleep", "30"])
    try:
        # Port 9 (discard): nothing answers there, so the live pid is not our sidecar.
        record = {"pid": foreign.pid, "http_port": 9, "grpc_port": 10}
        (data_dir / "qdrant.pid").write_text(json.dumps(record), encoding="utf-8")
        sidecar = start(data_dir, binary, sidecars, ready_timeout=1.0)
        assert sidecar.endpoint is not None and sidecar.endpoint.pid != foreign.pid
        assert foreign.poll() is None, "a process that is not our sidecar was signalled"
    finally:
        foreign.kill()
        foreign.wait()


def test_garbage_in_the_pid_file_is_removed(
    data_dir: Path, binary: Binary, sidecars: list[Sidecar]
) -> None:
    (data_dir / "qdrant.pid").write_text("not json", encoding="utf-8")
    sidecar = start(data_dir, binary, sidecars)
    assert sidecar.endpoint is not None and not sidecar.endpoint.reused


# --------------------------------------------------------------------------- stand-in only


@pytest.fixture
def standin(tmp_path: Path) -> Binary:
    return Binary(write_standin(tmp_path / "standin-bin"), "--qdrant-bin / FERREX_QDRANT_BIN")


def test_readiness_is_awaited_with_backoff(
    data_dir: Path, standin: Binary, sidecars: list[Sidecar], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_READY_DELAY", "1.0")
    began = time.monotonic()
    sidecar = start(data_dir, standin, sidecars)
    assert time.monotonic() - began >= 1.0
    assert sidecar.endpoint is not None and sidecar.ready(sidecar.endpoint.http_port)


def test_a_sidecar_never_ready_is_killed_and_reported(
    data_dir: Path, standin: Binary, sidecars: list[Sidecar], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_READY_DELAY", "60")
    sidecar = Sidecar(data_dir, standin, ready_timeout=0.8, stop_grace=2)
    sidecars.append(sidecar)
    with pytest.raises(FerrexError) as refused:
        sidecar.ensure_running()
    assert refused.value.code == "unavailable"
    assert "not ready after" in refused.value.message and "qdrant.log" in refused.value.message
    assert sidecar._process is not None and sidecar._process.poll() is not None
    assert not sidecar.pid_path.exists()


def test_a_sidecar_that_exits_at_start_is_reported_with_its_status(
    data_dir: Path, standin: Binary, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_EXIT_AT_START", "3")
    with pytest.raises(FerrexError) as refused:
        Sidecar(data_dir, standin).ensure_running()
    assert "exited with status 3" in refused.value.message
    assert "exiting at start" in (data_dir / "qdrant.log").read_text(encoding="utf-8")


def test_a_sidecar_ignoring_sigterm_is_killed_after_the_grace_period(
    data_dir: Path, standin: Binary, sidecars: list[Sidecar], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_IGNORE_SIGTERM", "1")
    sidecar = start(data_dir, standin, sidecars, stop_grace=0.5)
    assert sidecar.endpoint is not None
    pid = sidecar.endpoint.pid
    began = time.monotonic()
    assert sidecar.stop()
    assert 0.5 <= time.monotonic() - began < 10
    assert not pid_alive(pid)


def test_the_client_talks_grpc_with_the_key(
    data_dir: Path, standin: Binary, sidecars: list[Sidecar]
) -> None:
    sidecar = start(data_dir, standin, sidecars)
    assert sidecar.endpoint is not None
    client = connect_client(sidecar.endpoint)
    try:
        remote = client._client  # the qdrant-client's transport (gRPC preferred)
        assert remote._prefer_grpc is True
        assert remote._grpc_port == sidecar.endpoint.grpc_port
        assert remote._host == HOST and remote._api_key == sidecar.endpoint.api_key
    finally:
        client.close()


# --------------------------------------------------------------------------- discovery, mode


def test_binary_discovery_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data_dir = tmp_path / "data"
    on_path = write_standin(tmp_path / "path-bin")
    local = write_standin(data_dir / "bin")
    configured = write_standin(tmp_path / "configured")
    monkeypatch.setenv("PATH", f"{on_path.parent}{os.pathsep}/usr/bin:/bin")
    found = find_binary(configured, data_dir)
    assert found is not None and found.path == configured
    found = find_binary(None, data_dir)
    assert found is not None and (found.path, found.found_by) == (on_path, "PATH")
    monkeypatch.setenv("PATH", "/nonexistent")
    found = find_binary(None, data_dir)
    assert found is not None and (found.path, found.found_by) == (local, "<data dir>/bin/qdrant")
    local.unlink()
    assert find_binary(None, data_dir) is None
    with pytest.raises(FerrexError, match="not an executable"):
        find_binary(tmp_path / "missing", data_dir)


def test_mode_choice_never_switches_an_existing_store(
    tmp_path: Path, models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    standin = write_standin(tmp_path / "bin")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    settings = make_settings(fresh, models_dir, qdrant_bin=str(standin))
    meta = SqliteStore(settings.db_path)
    try:
        choice = choose_index_mode(settings, meta)
        assert choice.mode == "sidecar" and "qdrant binary was found" in choice.reason
        assert meta.get_meta(INDEX_MODE) == "sidecar"
    finally:
        meta.close()
    # A store from before modes existed (pinned, no recorded mode) stays embedded, and says
    # how to move when a binary is there.
    old = tmp_path / "old"
    old.mkdir()
    settings = make_settings(old, models_dir, qdrant_bin=str(standin))
    meta = SqliteStore(settings.db_path)
    try:
        meta.set_meta("embedding_model", "sentence-transformers/all-MiniLM-L6-v2")
        choice = choose_index_mode(settings, meta)
        assert choice.mode == "embedded" and "migrate-index --to sidecar" in choice.reason
        assert meta.get_meta(INDEX_MODE) == "embedded"
    finally:
        meta.close()
    # A sidecar store without a binary is refused, never opened empty in the embedded engine.
    settings = make_settings(fresh, models_dir)
    meta = SqliteStore(settings.db_path)
    try:
        with pytest.raises(FerrexError) as refused:
            choose_index_mode(settings, meta)
        assert "migrate-index --to embedded" in refused.value.message
    finally:
        meta.close()
    none = tmp_path / "none"
    none.mkdir()
    settings = make_settings(none, models_dir)
    meta = SqliteStore(settings.db_path)
    try:
        choice = choose_index_mode(settings, meta)
        assert choice.mode == "embedded" and "no qdrant binary found" in choice.reason
    finally:
        meta.close()


# --------------------------------------------------------------------------- processes


def ferrex_env(data_dir: Path, models_dir: Path, qdrant_bin: Path) -> dict[str, str]:
    return {
        **os.environ,
        "FERREX_HOME": str(data_dir),
        "FERREX_MODELS_DIR": str(models_dir),
        "FERREX_OFFLINE": "1",
        "FERREX_LOG": "info",
        "FERREX_QDRANT_BIN": str(qdrant_bin),
        "FERREX_MODEL_TIER": "small",
        "PATH": "/usr/bin:/bin",
    }


def sidecar_pid(data_dir: Path) -> int | None:
    try:
        return int(json.loads((data_dir / "qdrant.pid").read_text(encoding="utf-8"))["pid"])
    except (OSError, ValueError, KeyError):
        return None


def wait_for(predicate: object, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def spawn_server(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A ``ferrex`` stdio server with stdin held open (an idle MCP client)."""
    with open(log, "ab") as err:
        return subprocess.Popen(
            [ferrex_command()],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )


def stop_server(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        assert process.stdin is not None
        process.stdin.close()  # end of input: a clean exit
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_owner_processes_start_reuse_and_the_last_one_stops_the_sidecar(
    tmp_path: Path, models_dir: Path
) -> None:
    data_dir = tmp_path / "data"
    env = ferrex_env(data_dir, models_dir, write_standin(tmp_path / "bin"))
    log = tmp_path / "ferrex.log"
    first = spawn_server(env, log)
    second: subprocess.Popen[bytes] | None = None
    try:
        assert wait_for(lambda: sidecar_pid(data_dir) is not None), log.read_text()
        pid = sidecar_pid(data_dir)
        assert pid is not None and pid_alive(pid)
        started = log.read_text()
        assert "ferrex starting" in started and "mode=sidecar" in started, started
        assert "new store and a qdrant binary was found" in started
        # A second ferrex joins as a peer; the owner exits: the sidecar stays for the peer,
        # which takes over and reuses it.
        second = spawn_server(env, log)
        assert wait_for(lambda: "connected to the running ferrex engine" in log.read_text())
        stop_server(first)
        assert wait_for(lambda: "reusing the running qdrant sidecar" in log.read_text())
        assert "left the qdrant sidecar running" in log.read_text()
        assert sidecar_pid(data_dir) == pid and pid_alive(pid)
        # The owner is killed: the sidecar survives it; the next ferrex reuses it and, being
        # the last to leave, stops it.
        second.kill()
        second.wait()
        assert pid_alive(pid)
        third = subprocess.run(
            [ferrex_command(), "export", "-o", str(tmp_path / "out.jsonl")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert third.returncode == 0, third.stderr
        assert "reusing the running qdrant sidecar" in third.stderr
        assert "stopped the qdrant sidecar" in third.stderr
        assert wait_for(lambda: not pid_alive(pid), 15)
        assert sidecar_pid(data_dir) is None
        starts = (data_dir / "qdrant-data" / "standin-starts").read_text().split()
        assert starts == [str(pid)]  # one sidecar for all four processes
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
        leftover = sidecar_pid(data_dir)
        if leftover is not None and pid_alive(leftover):
            os.kill(leftover, signal.SIGKILL)


def test_doctor_names_the_mode_and_why(tmp_path: Path, models_dir: Path) -> None:
    data_dir = tmp_path / "data"
    env = ferrex_env(data_dir, models_dir, tmp_path / "missing-qdrant")
    env.pop("FERREX_QDRANT_BIN")
    created = subprocess.run(
        [ferrex_command(), "init"], env=env, capture_output=True, text=True, timeout=120
    )
    assert created.returncode == 0, created.stderr
    done = subprocess.run(
        [ferrex_command(), "doctor", "--json"], env=env, capture_output=True, text=True, timeout=120
    )
    report = json.loads(done.stdout)
    assert report["index_mode"]["mode"] == "embedded", report
    assert report["index_mode"]["reason"] == "this store's index is in the embedded engine"
    text = subprocess.run(
        [ferrex_command(), "doctor"], env=env, capture_output=True, text=True, timeout=120
    ).stdout
    assert "vector index mode: embedded (this store's index is in the embedded engine)" in text


@pytest.mark.anyio
async def test_store_and_recall_through_a_real_qdrant_sidecar(
    tmp_path: Path, models_dir: Path
) -> None:
    if REAL_QDRANT is None:
        pytest.skip("no qdrant binary on PATH: the sidecar data path ran on qdrant-client only")
    from tests.support.harness import mcp_client, ok

    data_dir = tmp_path / "data"
    async with mcp_client(data_dir, models_dir, FERREX_QDRANT_BIN=REAL_QDRANT) as client:
        stored = await ok(client, "store", {"content": "the sidecar keeps ferrex vectors"})
        found = await ok(client, "recall", {"query": "where are the vectors kept"})
        assert stored["id"] in [r["id"] for r in found["results"]]
        stats = await ok(client, "stats", {"detailed": True})
        assert stats["index"]["mode"] == "sidecar" and stats["index"]["sidecar"]["pid"]
    assert sidecar_pid(data_dir) is None  # the last owner stopped it


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def ferrex_cli(
    data_dir: Path, models_dir: Path, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    environment = {
        **os.environ,
        "FERREX_HOME": str(data_dir),
        "FERREX_MODELS_DIR": str(models_dir),
        "FERREX_OFFLINE": "1",
        "FERREX_LOG": "warning",
        "FERREX_MODEL_TIER": "small",
        "PATH": "/usr/bin:/bin",
        **env,
    }
    return subprocess.run(
        [ferrex_command(), *args], env=environment, capture_output=True, text=True, timeout=300
    )


@pytest.mark.anyio
async def test_migrate_index_is_explicit_and_rebuilds_the_target_from_sqlite(
    tmp_path: Path, models_dir: Path
) -> None:
    from tests.support.harness import call, mcp_client, ok

    data_dir = tmp_path / "data"
    async with mcp_client(data_dir, models_dir) as client:
        stored = await ok(client, "store", {"content": "the billing cron runs at 02:00 UTC"})
    same = ferrex_cli(data_dir, models_dir, "migrate-index", "--to", "embedded")
    assert same.returncode == 0 and "already in the embedded mode" in same.stderr
    refused = ferrex_cli(data_dir, models_dir, "migrate-index", "--to", "sidecar")
    assert refused.returncode == 2 and "no qdrant binary found" in refused.stderr
    assert "nothing was changed" in refused.stderr
    # A store whose vectors are in a sidecar (as `--to sidecar` leaves it), with no binary
    # here: ferrex refuses to open it silently empty, and says how to move it back.
    meta = SqliteStore(data_dir / "ferrex.db")
    meta.set_meta(INDEX_MODE, "sidecar")
    meta.close()
    async with mcp_client(data_dir, models_dir) as client:
        answer = await call(client, "recall", {"query": "billing cron"})
    assert "migrate-index --to embedded" in answer["error"]["message"], answer
    shutil.rmtree(data_dir / "index")  # the target is rebuilt from SQLite, not copied
    moved = ferrex_cli(data_dir, models_dir, "migrate-index", "--to", "embedded")
    assert moved.returncode == 0, moved.stderr
    assert "migrated 1 memories from sidecar to embedded" in moved.stderr
    async with mcp_client(data_dir, models_dir) as client:
        found = await ok(client, "recall", {"query": "when does the billing cron run"})
        stats = await ok(client, "stats", {"detailed": True})
    assert stored["id"] in [r["id"] for r in found["results"]]
    assert stats["index"]["mode"] == "embedded"
    assert "this store's index is in the embedded engine" in stats["index"]["reason"]
    if REAL_QDRANT is None:
        return  # the round trip through a real sidecar needs the binary (skipped visibly above)
    there = ferrex_cli(data_dir, models_dir, "migrate-index", "--to", "sidecar")
    assert there.returncode == 0, there.stderr
    async with mcp_client(data_dir, models_dir, FERREX_QDRANT_BIN=REAL_QDRANT) as client:
        found = await ok(client, "recall", {"query": "when does the billing cron run"})
    assert stored["id"] in [r["id"] for r in found["results"]]
