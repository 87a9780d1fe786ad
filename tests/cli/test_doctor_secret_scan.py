"""``ferrex doctor``'s secret scan is incremental and never reports less than a full one
(core/secrets/scan_marker.py): the first run scans everything and records where it stopped and
which memories held secrets; a later run reads only what was written since (inserted or
rewritten in place, by ferrex or behind its back) and those holders again. Other patterns,
another ``secret_handling``, ``--full`` or an unreadable record: a full scan. Real SQLite, the
real embedded engine, ``ferrex doctor`` as a subprocess."""

from __future__ import annotations

import json
import re
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from tests.support.harness import ServiceFactory, cli
from tests.support.secret_samples import SECRETS

from ferrex.cli.render import _secrets_line
from ferrex.core.secrets import scan_marker
from ferrex.core.secrets.fields import MEMORY_TEXT_FIELDS
from ferrex.core.secrets.sweep import _record, sweep
from ferrex.server.calls import run_tool as invoke
from ferrex.store.schema import MIGRATIONS
from ferrex.store.sqlite_rows import TEXT_COLUMNS

ALLOW = {"FERREX_SECRET_HANDLING": "allow"}
REDACT = {"FERREX_SECRET_HANDLING": "redact"}
PLAIN = (
    "the billing team migrated the invoices table on Tuesday",
    "search latency went down after the cache warm-up change",
    "the deploy pipeline now runs the smoke tests twice",
    "network maintenance window moved to Thursday night",
    "storage quota for the lab raised to two terabytes",
    "ticket TKT-12345678 tracks the flaky queue consumer",
)


def secret_text(i: int) -> str:
    _, text, secret = SECRETS[i]
    return text.format(s=secret)


def scan(
    data: Path, models_dir: Path, *extra: str, env: dict[str, str] = ALLOW, check: int = 0
) -> dict[str, Any]:
    done = cli(data, models_dir, "doctor", "--json", *extra, env=env, check=check)
    secrets: dict[str, Any] = json.loads(done.stdout)["secrets"]
    return secrets


def store(data: Path, models_dir: Path, text: str) -> str:
    done = cli(data, models_dir, "store", text, "--json", env=ALLOW)
    return str(json.loads(done.stdout)["id"])


def sql(data: Path, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
    with closing(sqlite3.connect(data / "ferrex.db")) as db, db:
        return db.execute(statement, params).fetchall()


@pytest.fixture
def data(make_service: ServiceFactory, tmp_path: Path) -> tuple[Path, list[str]]:
    """A closed store (secret_handling allow): six plain notes, a fact whose old value was a
    secret (superseded: an audit row), and an event holding a secret stored last."""
    data_dir = tmp_path / "scan"
    service = make_service(data_dir, secret_handling="allow")
    for text in PLAIN:
        assert invoke(service, "store", {"content": text, "type": "episodic"})["status"]
    _, _, key = SECRETS[3]
    old = invoke(service, "store", {"subject": "ci", "predicate": "api key", "object": key})
    invoke(service, "store", {"subject": "ci", "predicate": "api key", "object": "in vault ci"})
    last = invoke(service, "store", {"content": secret_text(0), "type": "episodic"})
    service.close()
    return data_dir, [old["id"], last["id"]]


def test_allowed_secrets_are_reported_by_every_scan_and_new_ones_by_the_incremental_one(
    data: tuple[Path, list[str]], models_dir: Path
) -> None:
    store_dir, holders = data
    first = scan(store_dir, models_dir)
    assert first["scanned"] == "full" and first["full_because"] == "no earlier scan"
    assert first["memories"] == 2 and set(first["sample"]) == set(holders)
    assert first["rows_scanned"]["memories"] == 9
    second = scan(store_dir, models_dir)
    assert second["scanned"] == "incremental" and "full_because" not in second
    assert second["rows_scanned"] == {"memories": 2, "audit_entries": 0}
    for key in ("memories", "kinds", "audit_entries", "ok"):
        assert second[key] == first[key], key
    new = store(store_dir, models_dir, secret_text(6))
    third = scan(store_dir, models_dir)
    assert third["scanned"] == "incremental" and third["memories"] == 3
    assert new in third["sample"] and third["rows_scanned"]["memories"] == 3
    assert third["kinds"]["slack token"] == 1
    full = scan(store_dir, models_dir, "--full")
    assert full["scanned"] == "full" and full["full_because"] == "--full"
    assert full["rows_scanned"]["memories"] == 10
    for key in ("memories", "kinds", "audit_entries"):
        assert full[key] == third[key], key
    human = cli(store_dir, models_dir, "doctor", env=ALLOW).stdout
    assert "[warn] secrets: 3 memories hold" in human
    assert "secret scan: incremental, 3 memories and 0 audit entries read" in human


def test_a_forgotten_holder_drops_out_and_a_reused_row_position_is_still_read(
    data: tuple[Path, list[str]], models_dir: Path
) -> None:
    """SQLite gives the next row the highest rowid + 1: forgetting the newest memory frees its
    rowid for the next store, which a high-water mark on rowids would never read."""
    store_dir, (old, last) = data
    assert scan(store_dir, models_dir)["memories"] == 2
    (rowid,) = sql(store_dir, "SELECT rowid FROM memories WHERE id = ?", (last,))[0]
    cli(store_dir, models_dir, "forget", last, env=ALLOW)
    after = scan(store_dir, models_dir)
    assert after["scanned"] == "incremental" and after["memories"] == 1
    assert after["sample"] == [old]
    new = store(store_dir, models_dir, secret_text(7))
    assert sql(store_dir, "SELECT rowid FROM memories WHERE id = ?", (new,))[0] == (rowid,)
    found = scan(store_dir, models_dir)
    assert found["scanned"] == "incremental" and found["memories"] == 2
    assert set(found["sample"]) == {old, new}


def test_other_patterns_or_handling_force_a_full_scan(
    data: tuple[Path, list[str]], models_dir: Path
) -> None:
    store_dir, _ = data
    assert scan(store_dir, models_dir)["memories"] == 2
    (store_dir / "ferrex.toml").write_text(
        '[secrets]\npatterns = { "ticket key" = "TKT-[0-9]{8}" }\n', encoding="utf-8"
    )
    own = scan(store_dir, models_dir)
    assert own["scanned"] == "full"
    assert own["full_because"] == "the scanner or its settings changed"
    assert own["memories"] == 3 and own["kinds"]["ticket key"] == 1
    again = scan(store_dir, models_dir)
    assert again["scanned"] == "incremental" and again["memories"] == 3
    (store_dir / "ferrex.toml").unlink()
    back = scan(store_dir, models_dir)
    assert back["scanned"] == "full" and back["memories"] == 2
    redact = scan(store_dir, models_dir, env=REDACT, check=1)
    assert redact["scanned"] == "full" and redact["memories"] == 2 and redact["ok"] is False


def test_repair_leaves_a_record_of_the_redacted_state_and_rewrites_are_read_again(
    data: tuple[Path, list[str]], models_dir: Path
) -> None:
    store_dir, holders = data
    assert scan(store_dir, models_dir)["memories"] == 2
    repaired = scan(store_dir, models_dir, "--repair", env=REDACT)
    assert repaired["scanned"] == "full" and repaired["redacted"] == 2 and repaired["ok"]
    after = scan(store_dir, models_dir, env=REDACT)
    # The redactions are rewrites: read once more (clean), then nothing is left to read.
    assert after["scanned"] == "incremental" and after["memories"] == 0 and after["ok"]
    assert after["rows_scanned"]["memories"] == 2
    quiet = scan(store_dir, models_dir, env=REDACT)
    assert quiet["rows_scanned"] == {"memories": 0, "audit_entries": 0}
    # A text rewritten in place behind ferrex's back (any future path that rewrites a memory
    # or an audit detail) is read by the next incremental scan.
    plain = sql(store_dir, "SELECT id FROM memories WHERE content = ?", (PLAIN[0],))[0][0]
    sql(store_dir, "UPDATE memories SET content = ? WHERE id = ?", (secret_text(5), plain))
    seq = sql(store_dir, "SELECT seq FROM audit WHERE detail IS NOT NULL LIMIT 1")[0][0]
    leak = json.dumps({"note": secret_text(4)})
    sql(store_dir, "UPDATE audit SET detail = ? WHERE seq = ?", (leak, seq))
    caught = scan(store_dir, models_dir, env=REDACT, check=1)
    assert caught["scanned"] == "incremental"
    assert caught["rows_scanned"] == {"memories": 1, "audit_entries": 1}
    assert caught["memories"] == 1 and caught["sample"] == [plain]
    assert caught["audit_entries"] == 1 and caught["ok"] is False
    assert scan(store_dir, models_dir, "--repair", env=REDACT)["redacted"] == 1
    assert scan(store_dir, models_dir, "--full", env=REDACT)["memories"] == 0
    assert not set(holders) & set(scan(store_dir, models_dir, env=REDACT)["sample"])


@pytest.mark.parametrize(
    "record",
    [
        "{not json",
        "[]",
        '{"format": 1, "fingerprint": "x", "writes": -1, "audit": 0, "holders": [],'
        ' "audit_hits": []}',
        '{"format": 1, "fingerprint": "x", "writes": 0, "audit": 0, "holders": "a"}',
    ],
)
def test_an_unreadable_record_falls_back_to_a_full_scan(
    data: tuple[Path, list[str]], models_dir: Path, record: str
) -> None:
    store_dir, holders = data
    assert scan(store_dir, models_dir)["scanned"] == "full"
    sql(store_dir, "UPDATE meta SET value = ? WHERE key = 'secret_scan'", (record,))
    report = scan(store_dir, models_dir)
    assert report["scanned"] == "full"
    assert report["full_because"] == "the earlier scan's record is unreadable"
    assert report["memories"] == 2 and set(report["sample"]) == set(holders)
    assert scan(store_dir, models_dir)["scanned"] == "incremental"


def test_writes_made_while_nothing_recorded_them_get_a_full_scan(
    data: tuple[Path, list[str]], models_dir: Path
) -> None:
    store_dir, _ = data
    assert scan(store_dir, models_dir)["memories"] == 2
    sql(store_dir, "DELETE FROM meta WHERE key = 'text_writes'")
    new = store(store_dir, models_dir, secret_text(5))
    assert sql(store_dir, "SELECT count(*) FROM text_writes") == [(0,)]
    report = scan(store_dir, models_dir)
    assert report["scanned"] == "full"
    assert report["full_because"] == "the record of writes was off"
    assert report["memories"] == 3 and new in report["sample"]
    assert scan(store_dir, models_dir)["scanned"] == "incremental"


def test_every_text_column_is_recorded_when_rewritten() -> None:
    """The trigger recording rewrites lists every column the scan reads."""
    assert set(TEXT_COLUMNS) == set(MEMORY_TEXT_FIELDS)
    found = re.search(r"AFTER UPDATE OF (.*?) ON memories", MIGRATIONS[4], re.S)
    assert found is not None
    columns = {c.strip() for c in found.group(1).split(",")}
    assert columns == set(TEXT_COLUMNS) | {"id", "type"}  # a fact's predicate counts


def test_a_doctor_that_started_earlier_never_sets_the_record_back(
    make_service: ServiceFactory, tmp_path: Path
) -> None:
    """Two doctors at once: A starts, a secret is stored, B scans it and records it; A then
    finishes. A's older record must not replace B's: B already forgot the writes up to its
    position, so the next scan would never read the new holder again."""
    service = make_service(tmp_path / "two", secret_handling="allow")
    invoke(service, "store", {"content": secret_text(0), "type": "episodic"})
    assert sweep(service, repair=False)["memories"] == 1  # the first, full scan
    _, writes_a, audit_a = service.meta.text_writes_start()  # doctor A starts
    a_found = sweep(service, repair=False)["sample"]  # what A's scan finds
    new = invoke(service, "store", {"content": secret_text(5), "type": "episodic"})["id"]
    b = sweep(service, repair=False)  # doctor B, started later, reads the new holder
    assert b["scanned"] == "incremental" and new in b["sample"]
    expected = scan_marker.fingerprint(service.settings)
    _record(service, scan_marker.ScanMarker(expected, writes_a, audit_a, a_found))  # A ends
    after = sweep(service, repair=False)
    assert after["scanned"] == "incremental"
    assert after["memories"] == 2 and new in after["sample"]


@pytest.mark.parametrize(
    ("secrets", "line"),
    [
        ({"memories": 0, "audit_entries": 0, "kinds": {}}, "[ok  ] secrets: none stored"),
        (
            {"memories": 1, "audit_entries": 1, "kinds": {"github token": 1}, "handling": "allow"},
            "[warn] secrets: 1 memory holds secrets (github token: 1)"
            " (secret_handling = allow keeps them)",
        ),
        (
            {"memories": 2, "audit_entries": 0, "kinds": {"aws access key": 1, "password": 1}},
            "[FAIL] secrets: 2 memories hold secrets (aws access key: 1, password: 1): run"
            " `ferrex doctor --repair` to redact them",
        ),
        (
            {"memories": 0, "audit_entries": 3, "kinds": {}, "handling": "redact"},
            "[FAIL] secrets: 3 audit log entries hold secrets: run `ferrex doctor --repair` to"
            " redact them",
        ),
    ],
)
def test_the_secrets_line_reads_as_english(secrets: dict[str, Any], line: str) -> None:
    """One memory holds, two memories hold; each kind with its count after a colon."""
    assert _secrets_line(secrets) == line
