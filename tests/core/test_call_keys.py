"""Exactly-once writes under an idempotency key (``core/call_keys.py``), in process on real
SQLite, Qdrant Edge and the real model: the engine side of a call a peer sends again after its
engine died. The kills themselves are in test_handover.py, through MCP."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ferrex.core.call_keys import KEEP_KEYS, record, recorded, valid_key
from ferrex.core.errors import FerrexError
from ferrex.core.results import ForgetResult
from ferrex.core.service import MemoryService
from ferrex.server.calls import run_tool


def test_a_store_sent_again_with_its_key_answers_the_first_answer(
    service: MemoryService,
) -> None:
    fact = {
        "subject": "billing service",
        "predicate": "uses database",
        "object": "Postgres 16",
        "entities": ["Postgres"],
    }
    first = run_tool(service, "store", fact, "key-fact")
    assert run_tool(service, "store", fact, "key-fact") == first  # entities, status: all of it
    event = {"content": "the staging database moved to eu-west-1 on Monday"}
    stored = run_tool(service, "store", event, "key-event")
    assert run_tool(service, "store", event, "key-event") == stored
    assert service.meta.count_memories() == 2
    with pytest.raises(FerrexError) as refused:  # without the key: a new call, a duplicate
        run_tool(service, "store", event)
    assert refused.value.code == "duplicate"
    assert refused.value.to_dict()["existing_id"] == stored["id"]


def test_a_refused_store_records_nothing(service: MemoryService) -> None:
    """A call refused (nothing applied) leaves no key: sent again, it is judged again."""
    with pytest.raises(FerrexError):
        run_tool(service, "store", {"content": "x", "supersedes": "mem_unknown"}, "key-refused")
    assert recorded(service.meta, "key-refused", ForgetResult) is None


def test_a_forget_sent_again_with_its_key_answers_deleted(service: MemoryService) -> None:
    kept = run_tool(service, "store", {"content": "the office wifi network is called Atlas"})
    gone = run_tool(service, "store", {"content": "the old VPN endpoint is vpn1.example.org"})
    first = run_tool(service, "forget", {"ids": [gone["id"]]}, "key-forget")
    assert first["deleted"] == [gone["id"]]
    assert run_tool(service, "forget", {"ids": [gone["id"]]}, "key-forget") == first
    plain = run_tool(service, "forget", {"ids": [gone["id"]]})  # a new call: nothing left
    assert plain["deleted"] == [] and plain["not_found"] == [gone["id"]]
    assert service.meta.existing_ids([kept["id"], gone["id"]]) == {kept["id"]}


def test_keys_are_kept_for_a_day_then_dropped(service: MemoryService) -> None:
    """``record_call`` drops the keys strictly older than ``forget_before`` (a day before)."""
    meta = service.meta
    now = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
    limit = now - KEEP_KEYS
    with meta.transaction():
        meta.record_call("at-limit", "store", "default", "{}", limit, limit - KEEP_KEYS)
        meta.record_call(
            "just-older", "store", "default", "{}", limit - timedelta(microseconds=1), limit
        )
    assert meta.call_answer("just-older") is not None  # recorded before it was pruned
    with meta.transaction():
        meta.record_call("now", "forget", "default", "{}", now, limit)
    assert meta.call_answer("at-limit") == "{}"
    assert meta.call_answer("just-older") is None
    assert meta.call_answer("now") == "{}"


def test_record_and_recorded_round_trip_and_ignore_no_key(service: MemoryService) -> None:
    answer = ForgetResult(["mem_a"], ["mem_b"], ["Alice"], "team", ["mem_c"])
    with service.meta.transaction():
        record(service.meta, "key-round-trip", "forget", "team", answer)
        record(service.meta, None, "forget", "team", answer)  # no key: nothing recorded
    assert recorded(service.meta, "key-round-trip", ForgetResult) == answer
    assert recorded(service.meta, None, ForgetResult) is None
    assert [valid_key(k) for k in ("k", "", "x" * 80, "x" * 81, 7, None)] == [
        "k",
        None,
        "x" * 80,
        None,
        None,
        None,
    ]
