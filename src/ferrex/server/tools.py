"""The five MCP tools: agent-facing descriptions (the spec's text), schemas and annotations.

Input schemas are written by hand to stay small (they are loaded into every agent's context);
``tests/test_tools_schema.py`` keeps them in step with the validating request models.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

INSTRUCTIONS = (
    "ferrex is your long-term memory. Call stats at the start of a conversation for a brief "
    "overview; call recall before answering questions about past work, known facts or "
    "workflows; call store whenever you learn something worth keeping (events as episodic, "
    "stable facts as subject/predicate/object, workflows as procedural steps). Every recall "
    "result carries freshness metadata: treat 'aging' results with care, and 'stale' or "
    "'superseded' ones as possibly outdated. Use reflect now and then to review stale memories "
    "and contradictions, and forget to remove what is wrong."
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
_NAMESPACE = {
    "type": "string",
    "description": "Memory namespace (project/workspace); defaults to the server's namespace",
    "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
}
_STRINGS = {"type": "array", "items": {"type": "string"}}
_IDS = {"type": "array", "items": {"type": "string"}}

STORE_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "type": {
            "type": "string",
            "enum": _TYPES,
            "description": "Auto-detected when omitted: semantic if subject+predicate+object "
            "provided, procedural if steps/conditions, episodic otherwise",
        },
        "content": {
            "type": "string",
            "description": "What happened (episodic) or the procedure steps (procedural). "
            'Self-contained format recommended: "what | when | where | who | why"',
        },
        "subject": {
            "type": "string",
            "description": "The entity this fact is about (semantic only)",
        },
        "predicate": {
            "type": "string",
            "description": "The relationship or property (semantic only)",
        },
        "object": {"type": "string", "description": "The value or target entity (semantic only)"},
        "confidence": {
            "type": "number",
            "minimum": 0,
            "maximum": 1,
            "description": "0.0-1.0, defaults to 1.0",
        },
        "source": {
            "type": "string",
            "description": 'Provenance (memory ID, URL, etc.); "memory:<id>" cites and '
            "validates that memory",
        },
        "entities": {
            **_STRINGS,
            "description": "Entity names for filtering and future knowledge graph expansion",
        },
        "context": {
            "type": "object",
            "description": "Structured context (task, project, outcome, etc.)",
        },
        "supersedes": {
            "type": "string",
            "description": "Memory ID to explicitly replace (skips similarity check)",
        },
        "namespace": _NAMESPACE,
        "timestamp": {
            "type": "string",
            "description": "ISO-8601 time of the event; defaults to now",
        },
        "t_valid": {
            "type": "string",
            "description": "ISO-8601 time a fact became true (semantic); defaults to now",
        },
        "t_invalid": {
            "type": ["string", "null"],
            "description": "ISO-8601 time a fact stopped being true (semantic): stores it as "
            "history. Omit (or null) for a fact that is true now",
        },
        "name": {
            "type": "string",
            "description": "Procedure name (procedural); a known name creates a new version",
        },
        "conditions": {**_STRINGS, "description": "When the procedure applies (procedural)"},
        "steps": {**_STRINGS, "description": "Ordered steps (procedural)"},
        "multi_valued": {
            "type": "boolean",
            "description": "The predicate holds several values at once: keep all",
        },
        "pinned": {"type": "boolean", "description": "Exempt from decay and eviction"},
        "rollback_to": {
            "type": "integer",
            "minimum": 1,
            "description": "With name: store a new version equal to this older version",
        },
        "version": {
            "type": "integer",
            "minimum": 1,
            "description": "Informational: ferrex numbers versions itself (a known name gets "
            "the next version); the response says which version was stored",
        },
    },
    "additionalProperties": False,
}

RECALL_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What to search for"},
        "types": {
            "type": "array",
            "items": {"type": "string", "enum": _TYPES},
            "description": "Filter by memory type",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": 200,
            "description": "Max results, default 5",
        },
        "time_range": {
            "type": "object",
            "properties": {"after": {"type": "string"}, "before": {"type": "string"}},
            "additionalProperties": False,
            "description": "{after, before} ISO-8601 bounds on the memory's time",
        },
        "entities": {**_STRINGS, "description": "Filter to memories involving these entities"},
        "include_stale": {
            "type": "boolean",
            "description": "Include memories flagged as potentially stale, default false",
        },
        "include_invalidated": {
            "type": "boolean",
            "description": "Include semantic facts with t_invalid set (historical queries), "
            "default false",
        },
        "namespace": _NAMESPACE,
        "as_of": {"type": "string", "description": "ISO-8601 instant: return what was valid then"},
        "explain": {
            "type": "boolean",
            "description": "Per result: dense/BM25 ranks, fused, rerank, boost",
        },
        "max_tokens": {
            "type": "integer",
            "minimum": 1,
            "description": "Token budget: results are cut, in rank order, when their content "
            "passes it",
        },
        "version": {"type": "integer", "minimum": 1, "description": "A specific procedure version"},
    },
    "required": ["query"],
    "additionalProperties": False,
}

FORGET_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "ids": {**_IDS, "description": "Specific memory IDs to delete"},
        "cascade": {
            "type": "boolean",
            "description": "Also remove entity-memory links for entities only referenced by "
            "forgotten memories",
        },
        "namespace": _NAMESPACE,
    },
    "required": ["ids"],
    "additionalProperties": False,
}

REFLECT_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "namespace": {
            **_NAMESPACE,
            "description": "Namespace to reflect over (default: the server's)",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": 200,
            "description": "Max items to return per category",
        },
        "include_contradictions": {
            "type": "boolean",
            "description": "Include contradiction alerts, default true",
        },
        "include_stale": {
            "type": "boolean",
            "description": "Include stale memory audit, default true",
        },
        "confirm_ids": {
            **_IDS,
            "description": "Memories you reviewed and confirm are still accurate",
        },
        "pin_ids": {**_IDS, "description": "Memories to pin (never decay or evict)"},
        "unpin_ids": {**_IDS, "description": "Memories to unpin"},
    },
    "additionalProperties": False,
}

STATS_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "namespace": {
            **_NAMESPACE,
            "description": "Namespace to query stats for (default: the server's)",
        },
        "detailed": {
            "type": "boolean",
            "description": "Default false (brief mode). Set true for full diagnostics.",
        },
    },
    "additionalProperties": False,
}

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
        "namespace": {"type": "string"},
        "status": {
            "type": "string",
            "enum": ["stored", "duplicate", "superseded", "historical", "contradiction", "ended"],
        },
        "evicted": {
            "type": "integer",
            "description": "Memories evicted by the storage budget or retention after this store",
        },
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
                    "score": {"type": "number"},
                    "age_days": {"type": "integer"},
                    "entities": {"type": "array", "items": {"type": "string"}},
                    "created_at": {"type": "string"},
                    "freshness": _FRESHNESS,
                },
                "required": [
                    "id",
                    "type",
                    "score",
                    "age_days",
                    "entities",
                    "created_at",
                    "freshness",
                ],
            },
        },
        "count": {"type": "integer"},
        "reranked": {"type": "boolean"},
        "score_basis": {"type": "string", "enum": ["rerank", "fused"]},
        "stale_held_back": {"type": "integer"},
        "truncated": {"type": "integer"},
    },
    "required": ["results", "count", "reranked", "score_basis", "stale_held_back"],
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


TOOLS: list[types.Tool] = [
    _tool(
        "store",
        STORE_DESCRIPTION,
        STORE_INPUT,
        STORE_OUTPUT,
        title="Store memory",
        read_only=False,
        destructive=False,
        idempotent=False,
    ),
    _tool(
        "recall",
        RECALL_DESCRIPTION,
        RECALL_INPUT,
        RECALL_OUTPUT,
        title="Recall memories",
        read_only=True,
        destructive=False,
        idempotent=True,
    ),
    _tool(
        "forget",
        FORGET_DESCRIPTION,
        FORGET_INPUT,
        FORGET_OUTPUT,
        title="Forget memories",
        read_only=False,
        destructive=True,
        idempotent=True,
    ),
    _tool(
        "reflect",
        REFLECT_DESCRIPTION,
        REFLECT_INPUT,
        REFLECT_OUTPUT,
        title="Reflect on memory health",
        read_only=False,
        destructive=False,
        idempotent=True,
    ),
    _tool(
        "stats",
        STATS_DESCRIPTION,
        STATS_INPUT,
        STATS_OUTPUT,
        title="Memory stats",
        read_only=True,
        destructive=False,
        idempotent=True,
    ),
]
TOOL_NAMES = tuple(t.name for t in TOOLS)
