"""MCP resources (``ferrex://stats``, ``ferrex://namespaces``, ``ferrex://memory/{id}``) and the
``memory-primer`` prompt, through the SDK's real stdio client and ``ferrex`` subprocesses.

Proves that they are listed with the capabilities, that each resource reads what the tools
hold (a second ferrex on the same data dir reads them through the engine that owns the store),
that an unknown memory or resource is a JSON-RPC error with the specification's code and a
message saying what to do, and that the primer tells an agent what to store and how, when to
recall and how to read freshness and contradictions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from tests.support.harness import call, mcp_client

from ferrex.server.tools import TOOLS

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def read(client: Client, uri: str) -> Any:
    result = await client.read_resource(uri)
    assert len(result.contents) == 1
    content = result.contents[0]
    assert str(content.uri) == uri and content.mime_type == "application/json"
    return json.loads(content.text)  # type: ignore[union-attr]


async def test_resources_are_listed_and_read_what_the_tools_hold(
    tmp_path: Path, models_dir: Path
) -> None:
    data = tmp_path / "d"
    async with mcp_client(data, models_dir, "--namespace", "work") as client:
        listed = await client.list_resources()
        templates = await client.list_resource_templates()
        assert sorted(str(r.uri) for r in listed.resources) == [
            "ferrex://namespaces",
            "ferrex://stats",
        ]
        assert [t.uri_template for t in templates.resource_templates] == ["ferrex://memory/{id}"]
        assert all(r.description and r.mime_type == "application/json" for r in listed.resources)

        event = await call(client, "store", {"content": "the nightly build moved to arm runners"})
        fact = await call(
            client,
            "store",
            {"subject": "api-server", "predicate": "uses", "object": "tokio 1.38"},
        )
        other = await call(
            client, "store", {"content": "a note in another project", "namespace": "side"}
        )
        stats = await read(client, "ferrex://stats")
        assert stats == await call(client, "stats", {})  # the stats tool's brief answer
        assert stats["total"] == 2  # the server's namespace, "work"
        namespaces = await read(client, "ferrex://namespaces")
        assert namespaces == {
            "default": "work",
            "namespaces": [
                {
                    "name": "side",
                    "total": 1,
                    "by_type": {"episodic": 1, "semantic": 0, "procedural": 0},
                },
                {
                    "name": "work",
                    "total": 2,
                    "by_type": {"episodic": 1, "semantic": 1, "procedural": 0},
                },
            ],
        }
        memory = await read(client, f"ferrex://memory/{event['id']}")
        assert memory["id"] == event["id"] and memory["type"] == "episodic"
        assert memory["content"] == "the nightly build moved to arm runners"
        assert memory["namespace"] == "work" and memory["freshness"]["staleness"] == "fresh"
        question = {"query": "tokio", "types": ["semantic"], "explain": True}
        recalled = (await call(client, "recall", question))["results"][0]
        as_resource = await read(client, f"ferrex://memory/{fact['id']}")
        for key in ("id", "type", "content"):
            assert as_resource[key] == recalled[key]
        for key in ("subject", "predicate", "object", "confidence"):  # the fact's details
            assert as_resource[key] == recalled["explain"][key]
        assert (await read(client, f"ferrex://memory/{other['id']}"))["namespace"] == "side"

        # A second ferrex on the same data dir (a peer) reads the same through the engine.
        async with mcp_client(data, models_dir, "--namespace", "side") as peer:
            assert (await read(peer, "ferrex://stats"))["total"] == 1
            assert (await read(peer, f"ferrex://memory/{fact['id']}"))["id"] == fact["id"]
            assert (await read(peer, "ferrex://namespaces"))["default"] == "side"

        with pytest.raises(MCPError) as missing:
            await client.read_resource("ferrex://memory/mem_00000000000000000000dead")
        assert missing.value.code == -32002 and "recall" in missing.value.message
        with pytest.raises(MCPError) as bogus:
            await client.read_resource("ferrex://everything")
        assert bogus.value.code == -32002 and "ferrex://stats" in bogus.value.message
        # Reading changed nothing: still two memories here, none accessed by the reads.
        assert (await call(client, "stats", {}))["total"] == 2


async def test_the_memory_primer_prompt(tmp_path: Path, models_dir: Path) -> None:
    async with mcp_client(tmp_path / "d", models_dir) as client:
        prompts = (await client.list_prompts()).prompts
        assert [p.name for p in prompts] == ["memory-primer"]
        assert [a.name for a in prompts[0].arguments or []] == ["namespace"]
        plain = await client.get_prompt("memory-primer")
        scoped = await client.get_prompt("memory-primer", {"namespace": "api-work"})
        with pytest.raises(MCPError):
            await client.get_prompt("no-such-prompt")
        tools = await client.list_tools()
    text = plain.messages[0].content.text  # type: ignore[union-attr]
    assert plain.messages[0].role == "user"
    for words in (
        "self-contained",
        "episodic",
        "subject, predicate, object",
        "procedural",
        "recall",
        "freshness",
        "stale",
        "contradiction",
        "supersedes",
        "reflect",
        "stats",
    ):
        assert words in text, words
    assert 'namespace="api-work"' in scoped.messages[0].content.text  # type: ignore[union-attr]
    assert "namespace=" not in text
    # The tool descriptions stay the design's text (the primer adds, it does not replace).
    assert [t.description for t in tools.tools] == [t.description for t in TOOLS]
