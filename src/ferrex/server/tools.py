"""The MCP tools, made from the registry's tool entries (``ferrex.registry``: names, the
spec's descriptions, hints), and the server's instructions.

Input schemas are made from the validating request models and output schemas from the answer
models (``server/schemas.py``), so the schema an agent is shown, the validation a call gets
and its error codes have one source, as do an answer's shape and its schema.
"""

from __future__ import annotations

import mcp_types as types

from ferrex import registry
from ferrex.registry import (  # the spec's text; re-exported for the tests that check it
    FORGET_DESCRIPTION,
    RECALL_DESCRIPTION,
    REFLECT_DESCRIPTION,
    STATS_DESCRIPTION,
    STORE_DESCRIPTION,
)
from ferrex.server.schemas import input_schema, output_schema

__all__ = [
    "FORGET_DESCRIPTION",
    "INSTRUCTIONS",
    "RECALL_DESCRIPTION",
    "REFLECT_DESCRIPTION",
    "STATS_DESCRIPTION",
    "STORE_DESCRIPTION",
    "TOOLS",
    "TOOL_NAMES",
    "build_tools",
]

INSTRUCTIONS = (
    "ferrex is your long-term memory. Call stats at the start of a conversation for a brief "
    "overview; call recall before answering questions about past work, known facts or "
    "workflows; call store whenever you learn something worth keeping (events as episodic, "
    "stable facts as subject/predicate/object, workflows as procedural steps). A recall result "
    "is id, type, content, score (relevance, higher is better) and freshness: treat 'aging' "
    "results with care, and 'stale' or 'superseded' ones as possibly outdated; contradiction: "
    "true names the other current values (contradicts); explain=true adds ranking details, and "
    "stats(detailed=true) says whether the reranker is active. Use reflect now and then: confirm "
    "what is still true (confirm_ids), fix outdated facts with store(supersedes=id), remove "
    "wrong memories with forget(ids)."
)


def _tool(operation: registry.Operation, max_limit: int) -> types.Tool:
    spec = operation.tool
    assert spec is not None and operation.request is not None and operation.answer is not None
    maxima = dict.fromkeys(spec.max_limit_of, max_limit)
    return types.Tool(
        name=operation.name,
        title=spec.title,
        description=spec.description,
        input_schema=input_schema(registry.resolve(operation.request), maxima=maxima),
        output_schema=output_schema(registry.resolve(operation.answer)),
        annotations=types.ToolAnnotations(
            title=spec.title,
            read_only_hint=not operation.writes,
            destructive_hint=spec.destructive,
            idempotent_hint=operation.idempotent,
            open_world_hint=False,
        ),
    )


def build_tools(max_limit: int = 200) -> list[types.Tool]:
    """The MCP tools (the registry's operations that are tools, in its order);
    ``max_limit``: recall's configured ``retrieval.max_limit``."""
    return [_tool(operation, max_limit) for operation in registry.TOOLS]


TOOLS = build_tools()
TOOL_NAMES = registry.TOOL_NAMES
