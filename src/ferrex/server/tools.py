"""The five MCP tools: agent-facing descriptions (the spec's text), schemas and annotations.

Input schemas are made from the validating request models (``server/schemas.py``), so the
schema an agent is shown, the validation a call gets and its error codes have one source.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

from ferrex.core.requests import (
    ForgetRequest,
    RecallRequest,
    ReflectRequest,
    StatsRequest,
    StoreRequest,
)
from ferrex.server.schemas import input_schema

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

STORE_DESCRIPTION = (
    "Store a memory for long-term recall. Call this whenever you learn something worth "
    "remembering: new facts about the user or project, decisions made, problems solved, "
    "workflows discovered, or corrections to previous knowledge. You can specify type explicitly "
    '("episodic" for events, "semantic" for stable facts, "procedural" for workflows) or omit it '
    "and the system will auto-detect from the fields you provide. Write self-contained memories — "
    "each should make sense on its own without surrounding context. Include relevant entities "
    "for filtering. If this updates a previously known fact, the system detects and resolves the "
    "contradiction automatically. Near-duplicate memories are rejected automatically."
)

RECALL_DESCRIPTION = (
    "Search long-term memory. Call this whenever you need to remember something: past "
    "discussions, known facts, established workflows, or entity relationships. Use stats at the "
    "start of a conversation for a quick overview — use recall when you have a specific question. "
    "Returns results ranked by relevance with freshness metadata — check the staleness field to "
    "gauge how current each memory is."
)

FORGET_DESCRIPTION = (
    "Delete or invalidate memories that are no longer accurate or relevant. Use this when you "
    "discover a memory is wrong, outdated, or the user asks you to forget something. First use "
    "recall to find the memory IDs, then pass them here."
)

REFLECT_DESCRIPTION = (
    "Audit memory health. Call this periodically (e.g., end of a long session or weekly) to: "
    "surface stale memories that need review, detect contradictions between active facts, and "
    "identify memories that haven't been validated recently. Review the results and use "
    "store/forget to address issues."
)

STATS_DESCRIPTION = (
    "Memory system overview. Call this at the START of every conversation for a quick status, or "
    "with detailed=true for full diagnostics. Default (brief) mode returns just what needs "
    "attention and recent context — enough to orient without wasting tokens. Detailed mode adds "
    "counts, staleness distribution, and storage info."
)

_TYPES = ["episodic", "semantic", "procedural"]

_FRESHNESS = {
    "type": "object",
    "properties": {
        "age_days": {"type": "integer"},
        "last_accessed": {"type": ["string", "null"]},
        "last_validated": {"type": ["string", "null"]},
        "access_count": {"type": "integer"},
        "staleness": {"type": "string", "enum": ["fresh", "aging", "stale", "superseded"]},
    },
    "required": ["age_days", "access_count", "staleness"],
}
_SUMMARY = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "type": {"type": "string"},
        "summary": {"type": "string"},
        "age_days": {"type": "integer"},
    },
    "required": ["id", "type", "summary", "age_days"],
}
_ATTENTION = {
    "type": "object",
    "properties": {
        "stale_count": {"type": "integer"},
        "conflict_count": {"type": "integer"},
        "unvalidated_count": {"type": "integer"},
    },
    "required": ["stale_count", "conflict_count", "unvalidated_count"],
}

STORE_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "type": {"type": "string", "enum": _TYPES},
        "status": {
            "type": "string",
            "enum": ["stored", "duplicate", "superseded", "historical", "contradiction", "ended"],
        },
        "superseded": {"type": "array", "items": {"type": "string"}},
        "contradicts": {"type": "array", "items": {"type": "string"}},
        "evicted": {"type": "integer"},
    },
    "required": ["id", "type", "status"],
}

RECALL_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "results": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "type": {"type": "string", "enum": _TYPES},
                    "content": {"type": "string"},
                    "score": {"type": "number", "minimum": 0, "maximum": 1},
                    "freshness": _FRESHNESS,
                    "contradiction": {"type": "boolean"},
                    "contradicts": {"type": "array", "items": {"type": "string"}},
                    "included_as": {"type": "string", "enum": ["contradiction", "neighbour"]},
                },
                "required": ["id", "type", "content", "score", "freshness"],
            },
        },
        "stale_held_back": {"type": "integer"},
        "truncated": {"type": "integer"},
        "no_results": {"type": "string"},
    },
    "required": ["results"],
}

FORGET_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "deleted": {"type": "array", "items": {"type": "string"}},
        "not_found": {"type": "array", "items": {"type": "string"}},
        "entities_removed": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["deleted", "not_found"],
}

REFLECT_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "namespace": {"type": "string"},
        "needs_review": {"type": "array", "items": {"type": "object"}},
        "contradictions": {"type": "array", "items": {"type": "object"}},
        "forget_candidates": {"type": "array", "items": {"type": "object"}},
        "alias_candidates": {"type": "array", "items": {"type": "object"}},
        "inactive_entities": {"type": "array", "items": {"type": "object"}},
    },
    "required": ["namespace", "forget_candidates"],
}

STATS_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "total": {"type": "integer"},
        "recent": {"type": "array", "items": _SUMMARY},
        "needs_attention": _ATTENTION,
        "counts": {"type": "object"},
        "staleness": {"type": "object"},
        "conflicts": {"type": "integer"},
        "entities": {"type": "integer"},
        "storage_mb": {"type": "number"},
        "disk_mb": {"type": "number"},
        "free_mb": {"type": "number"},
    },
    "required": ["total", "recent", "needs_attention"],
}


def _tool(
    name: str,
    description: str,
    schema: dict[str, Any],
    output: dict[str, Any],
    *,
    read_only: bool,
    destructive: bool,
    idempotent: bool,
    title: str,
) -> types.Tool:
    return types.Tool(
        name=name,
        title=title,
        description=description,
        input_schema=schema,
        output_schema=output,
        annotations=types.ToolAnnotations(
            title=title,
            read_only_hint=read_only,
            destructive_hint=destructive,
            idempotent_hint=idempotent,
            open_world_hint=False,
        ),
    )


def build_tools(max_limit: int = 200) -> list[types.Tool]:
    """The five tools; ``max_limit``: recall's configured ``retrieval.max_limit``."""
    return [
        _tool(
            "store",
            STORE_DESCRIPTION,
            input_schema(StoreRequest),
            STORE_OUTPUT,
            title="Store memory",
            read_only=False,
            destructive=False,
            idempotent=False,
        ),
        _tool(
            "recall",
            RECALL_DESCRIPTION,
            input_schema(RecallRequest, maxima={"limit": max_limit}),
            RECALL_OUTPUT,
            title="Recall memories",
            read_only=True,
            destructive=False,
            idempotent=True,
        ),
        _tool(
            "forget",
            FORGET_DESCRIPTION,
            input_schema(ForgetRequest),
            FORGET_OUTPUT,
            title="Forget memories",
            read_only=False,
            destructive=True,
            idempotent=True,
        ),
        _tool(
            "reflect",
            REFLECT_DESCRIPTION,
            input_schema(ReflectRequest),
            REFLECT_OUTPUT,
            title="Reflect on memory health",
            read_only=False,
            destructive=False,
            idempotent=True,
        ),
        _tool(
            "stats",
            STATS_DESCRIPTION,
            input_schema(StatsRequest),
            STATS_OUTPUT,
            title="Memory stats",
            read_only=True,
            destructive=False,
            idempotent=True,
        ),
    ]


TOOLS = build_tools()
TOOL_NAMES = tuple(t.name for t in TOOLS)
