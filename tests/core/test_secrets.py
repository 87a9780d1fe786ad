"""Credentials are never stored in plain text (issue 37, part 2), through a real MCP client, the
CLI and the bytes on disk.

Every secret-looking value comes from ``tests/support/secret_samples.py``, which builds them at
run time (the repository itself trips no secret scanner): 56 secrets of 45 kinds and 46 near
misses (commit shas, UUIDs, checksums, image digests, ARNs, bucket URLs, fingerprints, public
keys, base64 of plain data, placeholders and fillers, sentences about passwords).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from tests.support.harness import call, cli, mcp_client, ok
from tests.support.secret_samples import NEAR_MISSES, SECRETS

from ferrex.core.secrets.patterns import shannon_entropy
from ferrex.core.secrets.scanner import SecretScanner

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _texts() -> list[tuple[str, str, str]]:
    return [(kind, text.format(s=secret), secret) for kind, text, secret in SECRETS]


def _disk_bytes(data_dir: Path) -> bytes:
    """Every byte ferrex wrote under the data dir (SQLite, its WAL, the index), models aside."""
    out = bytearray()
    for path in sorted(data_dir.rglob("*")):
        if path.is_file() and "models" not in path.parts:
            out += path.read_bytes()
    return bytes(out)


def _leaks(blob: bytes, secrets: list[str]) -> list[str]:
    return [s[:12] for s in secrets if s.encode() in blob]


# ---------------------------------------------------------------------- the detector


def test_the_samples_cover_thirty_kinds_and_thirty_near_misses() -> None:
    assert len({kind for kind, _, _ in SECRETS}) >= 30
    assert len(NEAR_MISSES) >= 30


@pytest.mark.parametrize(("kind", "text", "secret"), _texts(), ids=lambda v: str(v)[:24])
def test_each_secret_is_found_and_named(kind: str, text: str, secret: str) -> None:
    redacted, kinds = SecretScanner().redact(text)
    assert secret not in redacted
    assert kind in kinds
    assert f"[redacted: {kind}]" in redacted


@pytest.mark.parametrize("text", NEAR_MISSES, ids=lambda v: v[:32])
def test_a_near_miss_is_left_alone(text: str) -> None:
    assert SecretScanner().redact(text) == (text, [])


def test_own_patterns_and_the_allow_list() -> None:
    scanner = SecretScanner({"ticket key": r"TKT-[0-9]{8}"}, allow=[r"^ghp_0{36}$"])
    text, kinds = scanner.redact("ticket TKT-12345678 and the fixture token ghp_" + "0" * 36)
    assert kinds == ["ticket key"]
    assert "TKT-" not in text and "ghp_" + "0" * 36 in text


def test_entropy_boundaries() -> None:
    assert shannon_entropy("") == 0.0
    assert shannon_entropy("aaaa") == 0.0
    assert shannon_entropy("ab") == pytest.approx(1.0)
    assert shannon_entropy("abcdefgh") == pytest.approx(3.0)


# ---------------------------------------------------------------------- through MCP


def _cli_with(data: Path, models_dir: Path, handling: str, *args: str, check: int = 0) -> Any:
    return cli(data, models_dir, *args, check=check, env={"FERREX_SECRET_HANDLING": handling})


def _count(data: Path) -> int:
    with sqlite3.connect(data / "ferrex.db") as db:
        return int(db.execute("SELECT count(*) FROM memories").fetchone()[0])


async def test_secrets_are_redacted_before_anything_is_stored(
    tmp_path: Path, models_dir: Path
) -> None:
    data = tmp_path / "d"
    log = tmp_path / "server.log"
    samples = _texts()
    secrets = [secret for _, _, secret in samples]
    password = next(s for k, _, s in samples if k == "password")
    async with mcp_client(data, models_dir, FERREX_LOG_FILE=str(log), FERREX_LOG="debug") as c:
        for kind, text, secret in samples:
            answer = await ok(c, "store", {"content": text, "type": "episodic"})
            assert {"kind": kind, "field": "content"} in answer["redacted"], text[:40]
            assert secret not in json.dumps(answer)
        fact = await ok(
            c,
            "store",
            {"subject": "staging db", "predicate": "password", "object": password},
        )
        assert fact["redacted"] == [{"kind": "password", "field": "object"}]
        procedure = await ok(
            c,
            "store",
            {
                "type": "procedural",
                "name": "rotate the deploy key",
                "steps": ["log in", f"run deploy --token {secrets[3]}", "check the pipeline"],
                "context": {"api_key": "9f8e7d6c5b4a3928", "project": "billing"},
            },
        )
        fields = {r["field"] for r in procedure["redacted"]}
        assert {"steps[2]", "context.api_key"} <= fields
        found = await ok(c, "recall", {"query": "staging db password", "limit": 5})
        assert "[redacted: password]" in json.dumps(found)
        steps = await ok(c, "recall", {"query": "rotate the deploy key", "types": ["procedural"]})
        shown = json.dumps(steps)
        assert "[redacted: github token]" in shown and "check the pipeline" in shown
        for query in ("AWS access key for the deploy role", "alerts bot slack token"):
            assert not _leaks(json.dumps(await ok(c, "recall", {"query": query})).encode(), secrets)
    assert _leaks(_disk_bytes(data), secrets) == []
    assert _leaks(log.read_bytes(), secrets) == []
    exported = cli(data, models_dir, "export").stdout
    assert _leaks(exported.encode(), secrets) == [] and "[redacted: aws access key]" in exported


async def test_near_misses_are_stored_as_they_are(tmp_path: Path, models_dir: Path) -> None:
    data = tmp_path / "d"
    async with mcp_client(data, models_dir) as client:
        for text in NEAR_MISSES:
            answer = await ok(client, "store", {"content": text, "type": "episodic"})
            assert "redacted" not in answer, text
    with sqlite3.connect(data / "ferrex.db") as db:
        stored = {row[0] for row in db.execute("SELECT content FROM memories")}
    assert stored == set(NEAR_MISSES)


async def test_refuse_stores_nothing_and_says_what_was_found(
    tmp_path: Path, models_dir: Path
) -> None:
    kind, text, secret = _texts()[3]  # a GitHub token
    async with mcp_client(tmp_path / "d", models_dir, FERREX_SECRET_HANDLING="refuse") as client:
        refused = await call(client, "store", {"content": text})
        error = refused["error"]
        assert error["code"] == "secret_detected"
        assert error["redacted"] == [{"kind": kind, "field": "content"}]
        assert "nothing was stored" in error["message"] and secret not in json.dumps(refused)
        stats = await ok(client, "stats", {})
        assert stats["total"] == 0
        fine = await ok(client, "store", {"content": NEAR_MISSES[0]})
        assert fine["status"] == "stored"


async def test_allow_keeps_the_text_and_doctor_repair_redacts_it_everywhere(
    tmp_path: Path, models_dir: Path
) -> None:
    data = tmp_path / "d"
    samples = _texts()[:12]
    secrets = [secret for _, _, secret in samples]
    async with mcp_client(data, models_dir, FERREX_SECRET_HANDLING="allow") as client:
        ids = []
        for _, text, _ in samples:
            answer = await ok(client, "store", {"content": text, "type": "episodic"})
            assert "redacted" not in answer
            ids.append(answer["id"])
        old = await ok(
            client, "store", {"subject": "ci", "predicate": "api key", "object": secrets[0]}
        )
        await ok(
            client,
            "store",
            {"subject": "ci", "predicate": "api key", "object": "kept in vault ci/prod"},
        )
    assert _leaks(_disk_bytes(data), secrets)  # allowed: stored as given
    exported = tmp_path / "old.jsonl"
    exported.write_text(cli(data, models_dir, "export").stdout)
    refusing, fresh = tmp_path / "refusing", tmp_path / "fresh"
    _cli_with(refusing, models_dir, "refuse", "init")
    _cli_with(fresh, models_dir, "redact", "init")
    refused = _cli_with(refusing, models_dir, "refuse", "import", str(exported), check=2)
    assert "13 memories of this file hold" in refused.stderr
    assert "nothing was imported" in refused.stderr
    assert _count(refusing) == 0
    imported = _cli_with(fresh, models_dir, "redact", "import", str(exported))
    assert "redacted" in imported.stdout + imported.stderr
    assert _count(fresh) == 14
    assert _leaks(_disk_bytes(fresh), secrets) == []
    report = json.loads(cli(data, models_dir, "doctor", "--json", check=1).stdout)
    assert report["secrets"]["memories"] == 13 and report["ok"] is False
    assert old["id"] in report["secrets"]["sample"]  # a superseded version counts too
    shown = cli(data, models_dir, "doctor", check=1).stdout
    assert "[FAIL] secrets: 13 memories hold" in shown and "ferrex doctor --repair" in shown
    assert not _leaks(shown.encode(), secrets)
    repaired = json.loads(cli(data, models_dir, "doctor", "--repair", "--json").stdout)
    assert repaired["secrets"]["redacted"] == 13 and repaired["ok"] is True
    assert _leaks(_disk_bytes(data), secrets) == []
    after = json.loads(cli(data, models_dir, "doctor", "--json").stdout)
    assert after["secrets"]["memories"] == 0 and after["in_agreement"] is True
    async with mcp_client(data, models_dir) as client:
        found: dict[str, Any] = await ok(client, "recall", {"query": "staging db password"})
        assert "[redacted: password]" in json.dumps(found)
