"""Lean answers, measured through MCP as the agent reads them.

- A recall result is the design's shape (id, type, content, score, freshness) plus what the
  agent acts on for that result; a 5-result recall of mixed types carries at most 250
  characters per result beyond its content (compact JSON, the text content the model reads).
- tools/list as the model sees it (names, descriptions, input schemas) is at most 6,000
  characters, with the design's five tool descriptions verbatim.
- Every success answer is valid for its tool's output schema; timestamps are to the second.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from mcp import Client
from tests.support.harness import mcp_client
from tests.support.paths import ROOT

from ferrex import registry
from ferrex.server.tools import (
    FORGET_DESCRIPTION,
    RECALL_DESCRIPTION,
    REFLECT_DESCRIPTION,
    STATS_DESCRIPTION,
    STORE_DESCRIPTION,
)

MAX_RECALL_OVERHEAD = 250  # characters per result beyond its content
MAX_TOOLS_LIST = 6_000
SPEC = ROOT.parent / "shared" / "spec" / "ferrex-design.md"
DESCRIPTIONS = {
    "store": STORE_DESCRIPTION,
    "recall": RECALL_DESCRIPTION,
    "forget": FORGET_DESCRIPTION,
    "reflect": REFLECT_DESCRIPTION,
    "stats": STATS_DESCRIPTION,
}
SUB_SECOND = re.compile(r"\d\d:\d\d:\d\d\.\d+")


class Answers:
    """Tool calls that check each success answer against the tool's declared output schema."""

    def __init__(self, client: Client, schemas: dict[str, dict[str, Any]]) -> None:
        self.client = client
        self.schemas = schemas
        self.texts: list[str] = []

    async def __call__(self, tool: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], str]:
        result = await self.client.call_tool(tool, arguments)
        assert not result.is_error, result
        text = result.content[0].text  # type: ignore[union-attr]
        payload = result.structured_content
        assert payload == json.loads(text)  # the text is the structured content, once
        jsonschema.validate(payload, self.schemas[tool])
        # The answer model the schema is made from reads the answer back unchanged.
        model = registry.resolve(registry.BY_NAME[tool].answer or "")
        assert model.model_validate(payload).model_dump(mode="json", exclude_unset=True) == payload
        assert not SUB_SECOND.search(text), text
        self.texts.append(text)
        return payload, text


def _store(content: str, **extra: Any) -> dict[str, Any]:
    return {"content": content, **extra}


async def test_a_mixed_recall_is_lean(tmp_path: Path, models_dir: Path) -> None:
    last_week = (datetime.now(UTC) - timedelta(days=7)).strftime("%Y-%m-%dT%H:%M:%SZ")
    async with mcp_client(tmp_path / "d", models_dir) as client:
        listed = await client.list_tools()
        schemas = {t.name: t.output_schema for t in listed.tools}
        answer = Answers(client, schemas)  # type: ignore[arg-type]
        episode, _ = await answer(
            "store",
            _store(
                "the billing service deploy failed because the payments database migration "
                "locked the invoices table",
                timestamp=last_week,
                entities=["billing service", "payments database"],
            ),
        )
        await answer(
            "store",
            _store("rolled the billing service back and re-ran the migration at night"),
        )
        old_fact, _ = await answer(
            "store", {"subject": "billing service", "predicate": "database", "object": "mysql 8"}
        )
        new_fact, _ = await answer(
            "store",
            {"subject": "billing service", "predicate": "database", "object": "postgres 16"},
        )
        assert new_fact["superseded"] == [old_fact["id"]]
        assert set(new_fact) == {"id", "type", "status", "superseded"}, new_fact
        procedure, _ = await answer(
            "store",
            {
                "type": "procedural",
                "name": "deploy-billing",
                "steps": ["run the database migration", "deploy the billing service"],
            },
        )
        assert set(procedure) == {"id", "type", "status", "version"}, procedure

        recalled, text = await answer(
            "recall",
            {"query": "billing service database deploy", "include_invalidated": True},
        )
        results = recalled["results"]
        assert len(results) == 5
        assert {r["type"] for r in results} == {"episodic", "semantic", "procedural"}
        content = sum(len(json.dumps(r["content"], ensure_ascii=False)) for r in results)
        overhead = (len(text) - content) / len(results)
        print(f"\nrecall: {len(text)} characters, {overhead:.0f} per result beyond content")
        assert overhead <= MAX_RECALL_OVERHEAD, (overhead, text)
        design = {"id", "type", "content", "score", "freshness"}
        by_id = {r["id"]: r for r in results}
        for result in results:
            assert set(result) >= design
            assert set(result["freshness"]) == {
                "age_days",
                "last_accessed",
                "last_validated",
                "access_count",
                "staleness",
            }
            assert result["score"] >= 0
        # Only what the agent acts on for that result, beyond the design's shape.
        assert set(by_id[episode["id"]]) == design | {"timestamp"}  # an event from the past
        assert by_id[episode["id"]]["timestamp"] == last_week
        assert set(by_id[procedure["id"]]) == design | {"version"}
        assert set(by_id[new_fact["id"]]) == design
        history = by_id[old_fact["id"]]
        assert set(history) == design | {"t_valid", "t_invalid", "superseded_by"}
        assert history["superseded_by"] == new_fact["id"]
        assert set(recalled) == {"results"}  # nothing said once per session is repeated here

        # Ranks, entities, creation time, the fact's parts, the score basis: behind explain.
        explained, _ = await answer(
            "recall",
            {
                "query": "billing service database deploy",
                "include_invalidated": True,
                "explain": True,
            },
        )
        details = {r["id"]: r["explain"] for r in explained["results"]}
        assert details[episode["id"]]["entities"] == ["billing service", "payments database"]
        assert details[new_fact["id"]]["object"] == "postgres 16"
        assert {"dense_rank", "bm25_rank", "fused_rank", "created_at"} <= set(
            details[procedure["id"]]
        )
        assert explained["explain"]["score_basis"] in {"fused", "rerank"}

        # The other answers are lean too, and valid for their output schemas.
        brief, _ = await answer("stats", {})
        assert set(brief) <= {"total", "recent", "needs_attention", "warnings"}
        await answer("stats", {"detailed": True})
        reflected, _ = await answer("reflect", {})
        assert "hint" not in reflected  # said once, in the server instructions
        forgotten, _ = await answer("forget", {"ids": [episode["id"]]})
        assert forgotten == {"deleted": [episode["id"]], "not_found": []}


async def test_tools_list_as_the_model_sees_it_is_small(tmp_path: Path, models_dir: Path) -> None:
    async with mcp_client(tmp_path / "d", models_dir) as client:
        listed = await client.list_tools()
    view = [
        {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
        for t in listed.tools
    ]
    size = len(json.dumps(view, ensure_ascii=False, separators=(",", ":")))
    print(f"\ntools/list as the model sees it: {size} characters")
    assert size <= MAX_TOOLS_LIST, size
    for tool in listed.tools:
        assert tool.description == DESCRIPTIONS[tool.name]


def test_tool_descriptions_are_the_designs_verbatim() -> None:
    if not SPEC.is_file():
        pytest.skip(f"the design document is not beside the repository ({SPEC})")
    design = SPEC.read_text(encoding="utf-8")
    for name, description in DESCRIPTIONS.items():
        assert description in design, name
