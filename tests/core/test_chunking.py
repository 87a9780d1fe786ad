"""Chunking strategy (spec "Chunking Strategy", "Chunking" unit tests).

Proves with the real MiniLM tokenizer (context 256 tokens): episodic content is never chunked and is
rejected past the context ("Episodic memory too long. Break into separate events.", code
``episodic_too_long``, exactly at the 256/257 boundary) with nothing written; semantic triples are
always one vector; procedural content within the context is one vector, and past it is split on
step boundaries into one point per step sharing the memory id with the right ``step_index``;
recall returns such a procedure once, whole; forget removes every step point.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from typing import Any

import pytest
from tests.support.vocabulary import SUBSYSTEMS

from ferrex.core.errors import FerrexError
from ferrex.core.ids import point_id
from ferrex.core.index.chunking import (
    EPISODIC_TOO_LONG_MESSAGE,
    plan_chunks,
    split_procedure,
    split_steps,
    step_prefix,
)
from ferrex.core.memory import Memory, MemoryType
from ferrex.core.ports import IndexFilter
from ferrex.core.service import MemoryService
from ferrex.embed.embedder import FastEmbedEmbedder
from ferrex.server.calls import run_tool as invoke
from ferrex.server.calls import store_many

CONTEXT = 256
NOW = datetime(2026, 4, 1, tzinfo=UTC)


def words(count: int) -> str:
    """Text of exactly ``count`` word tokens ("word" is one token for MiniLM)."""
    return " ".join(["word"] * count)


def long_steps() -> list[str]:
    return [
        f"drain the {name} queue, snapshot its state to object storage, verify the checksum, "
        f"then restart the {name} workers one availability zone at a time"
        for name in SUBSYSTEMS
    ]


def plan(memory_type: MemoryType, text: str, embedder: FastEmbedEmbedder, **kw: Any) -> list:
    return plan_chunks(
        memory_type,
        text,
        steps=kw.pop("steps", []),
        count_tokens=embedder.count_tokens,
        max_tokens=embedder.info.max_tokens,
        **kw,
    )


def table_counts(service: MemoryService) -> dict[str, int]:
    connection = sqlite3.connect(service.settings.db_path)
    try:
        tables = [
            r[0]
            for r in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        return {t: connection.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables}
    finally:
        connection.close()


# --------------------------------------------------------------------------- split_steps


def test_split_on_numbered_and_bulleted_steps() -> None:
    text = "Procedure: deploy\nWhen: tests pass\n1. build release\n2) push\n- apply\n* smoke test"
    assert split_procedure(text) == (
        "Procedure: deploy When: tests pass",
        ["1. build release", "2) push", "- apply", "* smoke test"],
    )
    assert split_steps(text) == ["1. build release", "2) push", "- apply", "* smoke test"]


def test_continuation_lines_stay_with_their_step() -> None:
    text = "Step 1: build\n   with --release\n\nStep 2: push\n  to the registry"
    assert split_steps(text) == ["Step 1: build with --release", "Step 2: push to the registry"]


def test_unmarked_lines_are_steps() -> None:
    assert split_steps("build\n\npush\napply") == ["build", "push", "apply"]


# --------------------------------------------------------------------------- plan_chunks


def test_model_context_is_256_tokens(embedder: FastEmbedEmbedder) -> None:
    assert embedder.info.max_tokens == CONTEXT
    # [CLS] and [SEP] count: 254 words fill the context exactly.
    assert embedder.count_tokens(words(CONTEXT - 2)) == CONTEXT


def test_episodic_at_the_context_is_one_vector(embedder: FastEmbedEmbedder) -> None:
    text = words(CONTEXT - 2)
    assert [(c.index, c.text) for c in plan(MemoryType.EPISODIC, text, embedder)] == [(0, text)]


def test_episodic_past_the_context_is_rejected(embedder: FastEmbedEmbedder) -> None:
    with pytest.raises(FerrexError) as error:
        plan(MemoryType.EPISODIC, words(CONTEXT - 1), embedder)
    assert error.value.code == "episodic_too_long"
    assert error.value.message == "Episodic memory too long. Break into separate events."
    assert error.value.details == {"tokens": CONTEXT + 1, "max_tokens": CONTEXT}


def test_semantic_triple_is_always_one_vector(embedder: FastEmbedEmbedder) -> None:
    text = "api-server uses " + words(1000)
    chunks = plan(MemoryType.SEMANTIC, text, embedder)
    assert len(chunks) == 1 and chunks[0].text == text


def test_short_procedure_is_one_vector(embedder: FastEmbedEmbedder) -> None:
    text = "1. build release\n2. push to registry\n3. apply k8s manifest"
    chunks = plan(MemoryType.PROCEDURAL, text, embedder, steps=["a", "b", "c"])
    assert [(c.index, c.text) for c in chunks] == [(0, text)]


def test_long_procedure_splits_on_steps(embedder: FastEmbedEmbedder) -> None:
    steps = long_steps()
    text = "\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1))
    assert embedder.count_tokens(text) > CONTEXT
    chunks = plan(MemoryType.PROCEDURAL, text, embedder, steps=steps, step_prefix="rotate: ")
    assert [c.index for c in chunks] == list(range(len(steps)))
    assert [c.text for c in chunks] == [f"rotate: {s}" for s in steps]
    from_text = plan(MemoryType.PROCEDURAL, text, embedder)  # steps recovered from the content
    assert [c.text for c in from_text] == [f"{i}. {s}" for i, s in enumerate(steps, 1)]


def test_preamble_prefixes_steps_and_never_shifts_step_index(embedder: FastEmbedEmbedder) -> None:
    steps = long_steps()
    text = "Procedure: rotate\nWhen: quarterly maintenance window\n" + "\n".join(
        f"{i}. {s}" for i, s in enumerate(steps, 1)
    )
    chunks = plan(MemoryType.PROCEDURAL, text, embedder)
    assert [c.index for c in chunks] == list(range(len(steps)))
    assert chunks[0].text == (f"Procedure: rotate When: quarterly maintenance window 1. {steps[0]}")


def test_step_prefix_names_the_procedure_and_its_conditions() -> None:
    def procedure(name: str | None, conditions: list[str]) -> Memory:
        return Memory(
            id="mem_x",
            namespace="default",
            type=MemoryType.PROCEDURAL,
            created_at=NOW,
            updated_at=NOW,
            event_time=NOW,
            name=name,
            conditions=conditions,
        )

    assert step_prefix(procedure("deploy", [])) == "deploy: "
    assert step_prefix(procedure("deploy", ["on main", "tests pass"])) == (
        "deploy (when on main; tests pass): "
    )
    assert step_prefix(procedure(None, ["on main"])) == "when on main: "
    assert step_prefix(procedure(None, [])) == ""


def test_long_single_step_procedure_is_not_cut(embedder: FastEmbedEmbedder) -> None:
    text = words(400)
    assert [c.text for c in plan(MemoryType.PROCEDURAL, text, embedder)] == [text]


# --------------------------------------------------------------------------- service


def test_too_long_episodic_store_is_rejected_and_writes_nothing(service: MemoryService) -> None:
    invoke(service, "store", {"content": "a short event that fits", "entities": ["fits"]})
    before = (table_counts(service), service.index.points_by_memory())
    with pytest.raises(FerrexError) as error:
        invoke(service, "store", {"content": words(CONTEXT - 1), "entities": ["too-long-entity"]})
    assert error.value.code == "episodic_too_long"
    assert error.value.message == EPISODIC_TOO_LONG_MESSAGE
    assert (table_counts(service), service.index.points_by_memory()) == before


def test_episodic_at_the_context_is_stored(service: MemoryService) -> None:
    stored = invoke(service, "store", {"content": words(CONTEXT - 2)})
    assert stored["status"] == "stored" and "chunks" not in stored
    assert service.index.points_by_memory()[stored["id"]] == [point_id(stored["id"], 0)]


def test_long_semantic_object_is_one_point(
    service: MemoryService, embedder: FastEmbedEmbedder
) -> None:
    long_object = words(390)  # within the field limit, past the model context
    assert embedder.count_tokens(f"api-server description {long_object}") > CONTEXT
    stored = invoke(
        service,
        "store",
        {"subject": "api-server", "predicate": "description", "object": long_object},
    )
    assert service.meta.get_memory(stored["id"]).chunk_count == 1
    assert service.index.points_by_memory()[stored["id"]] == [point_id(stored["id"], 0)]


def test_long_procedure_has_one_point_per_step(
    service: MemoryService, embedder: FastEmbedEmbedder
) -> None:
    steps = long_steps()
    stored = invoke(
        service, "store", {"type": "procedural", "name": "rotate-subsystems", "steps": steps}
    )
    memory_id = stored["id"]
    points = service.index.points_by_memory()
    assert sorted(points[memory_id]) == sorted(point_id(memory_id, i) for i in range(len(steps)))
    assert service.meta.get_memory(memory_id).chunk_count == len(steps)
    # Each step's own text finds its point, which carries the memory id and its step index.
    flt = IndexFilter(namespace="default", types=("procedural",))
    for index in (0, 4, len(steps) - 1):
        [vector] = embedder.embed_documents([f"rotate-subsystems: {steps[index]}"])
        [best] = service.index.dense_search(vector, flt, 1, 128)
        assert (best.memory_id, best.chunk) == (memory_id, index)


def test_step_points_carry_their_step_index(service: MemoryService) -> None:
    import qdrant_edge as q

    steps = long_steps()
    split = invoke(
        service, "store", {"type": "procedural", "name": "rotate-subsystems", "steps": steps}
    )
    whole = invoke(
        service, "store", {"type": "procedural", "name": "restart", "steps": ["stop", "start"]}
    )
    records, _ = service.index.shard.scroll(  # type: ignore[attr-defined]
        q.ScrollRequest(limit=1000, with_payload=["memory_id", "chunk", "step_index"])
    )
    payloads = [r.payload for r in records]
    split_steps = sorted(p["step_index"] for p in payloads if p["memory_id"] == split["id"])
    assert split_steps == list(range(len(steps)))
    assert all(p["step_index"] == p["chunk"] for p in payloads if "step_index" in p)
    # A procedure embedded whole has one point and no step to name.
    [whole_point] = [p for p in payloads if p["memory_id"] == whole["id"]]
    assert "step_index" not in whole_point


def test_chunked_procedure_is_found_by_its_conditions(service: MemoryService) -> None:
    stored = invoke(
        service,
        "store",
        {
            "type": "procedural",
            "name": "rotate-subsystems",
            "conditions": ["a security advisory mandates credential rotation"],
            "steps": long_steps(),
        },
    )
    invoke(service, "store", {"content": "the geo lookup service was slow on monday"})
    invoke(
        service,
        "store",
        {
            "type": "procedural",
            "content": "1. revoke the leaked api token\n2. notify the security team about the "
            "credentials",
        },
    )
    results = invoke(
        service,
        "recall",
        {"query": "what to do after a security advisory about credentials", "limit": 1},
    )["results"]
    assert [r["id"] for r in results] == [stored["id"]]


def test_long_procedure_from_content_splits_on_its_lines(service: MemoryService) -> None:
    content = "\n".join(f"{i}. {s}" for i, s in enumerate(long_steps(), 1))
    stored = invoke(service, "store", {"type": "procedural", "content": content})
    assert service.meta.get_memory(stored["id"]).chunk_count == len(SUBSYSTEMS)
    assert len(service.index.points_by_memory()[stored["id"]]) == len(SUBSYSTEMS)


def test_recall_returns_a_chunked_procedure_once_and_whole(service: MemoryService) -> None:
    steps = long_steps()
    stored = invoke(
        service, "store", {"type": "procedural", "name": "rotate-subsystems", "steps": steps}
    )
    invoke(service, "store", {"content": "the geo lookup service was slow on monday"})
    results = invoke(
        service, "recall", {"query": "drain the geo lookup queue and restart", "limit": 10}
    )
    matching = [r for r in results["results"] if r["id"] == stored["id"]]
    assert len(matching) == 1
    assert service.meta.get_memory(matching[0]["id"]).steps == steps
    assert all(step in matching[0]["content"] for step in steps)


def test_forget_removes_every_step_point(service: MemoryService) -> None:
    stored = invoke(
        service, "store", {"type": "procedural", "name": "rotate", "steps": long_steps()}
    )
    invoke(service, "forget", {"ids": [stored["id"]]})
    assert stored["id"] not in service.index.points_by_memory()


def test_a_long_procedure_does_not_crowd_other_memories_out_of_recall(
    service: MemoryService,
) -> None:
    """Channels are cut to distinct memories, not points: a 40-step procedure whose every step
    matches the query still leaves room for the episodes, and the page does not depend on
    ``limit`` (the same memories lead at limit 5 and limit 30)."""
    steps = [
        f"Step {i}: reconcile ledger partition {i} and verify totals against the bank statement"
        for i in range(1, 41)
    ]
    procedure = invoke(
        service, "store", {"type": "procedural", "name": "month-end-close", "steps": steps}
    )
    episodes = [
        invoke(service, "store", {"content": text})["id"]
        for text in (
            "The finance team closed the books for March after reconciling the ledger",
            "Bank statement import failed because the CSV export changed format",
            "Auditors asked for the reconciliation report for Q1",
        )
    ]
    query = "reconcile the ledger with the bank statement"
    small = [r["id"] for r in invoke(service, "recall", {"query": query, "limit": 5})["results"]]
    large = [r["id"] for r in invoke(service, "recall", {"query": query, "limit": 30})["results"]]
    assert set(small) == {procedure["id"], *episodes}
    assert small == large[: len(small)]
    assert small.count(procedure["id"]) == 1


def test_a_few_chunked_procedures_cost_no_extra_engine_query(service: MemoryService) -> None:
    """The first page has headroom for some chunks: a recall over a store with a couple of
    chunked procedures among its candidates is still one engine call (a counting wrapper around
    the real index, which answers every call)."""
    invoke(service, "store", {"type": "procedural", "name": "rotate", "steps": long_steps()})
    archive = [
        f"archive the {name} logs to cold storage, compress them, record the archive checksum "
        f"in the runbook, then truncate the {name} log volume"
        for name in SUBSYSTEMS
    ]
    archived = invoke(service, "store", {"type": "procedural", "name": "archive", "steps": archive})
    assert service.meta.get_memory(archived["id"]).chunk_count > 1
    store_many(
        service,
        [{"content": f"the {s} queue was drained on day {i}"} for i, s in enumerate(SUBSYSTEMS)],
    )
    calls: list[int] = []
    search_batch = service.index.search_batch

    def counted(dense: Any, sparse: Any, searches: Any, hnsw_ef: int, tokens: Any = None) -> Any:
        # The channel fetch (not the id-filtered evidence lookups): its depth, once per batch.
        depths = {limit for _, flt, limit in searches if flt.memory_ids is None}
        calls.extend(depths)
        return search_batch(dense, sparse, searches, hnsw_ef, tokens)

    service.index.search_batch = counted  # type: ignore[method-assign]
    results = invoke(
        service, "recall", {"query": "drain the queue and restart the workers", "limit": 10}
    )
    assert len(results["results"]) == 10
    assert calls == [45], calls  # one call, 1.5 x the prefetch of 30
