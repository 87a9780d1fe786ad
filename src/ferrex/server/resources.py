"""Read-only MCP resources and the session-start prompt.

- ``ferrex://stats``: the brief stats of the server's namespace (what the stats tool answers).
- ``ferrex://namespaces``: every namespace with its memory counts by type.
- ``ferrex://memory/{id}``: one memory with its metadata and freshness.
- prompt ``memory-primer``: what to store and how, when to recall, how to read freshness and
  contradictions (optionally for one namespace).

Resources are read through the same backend as the tools (the data dir's engine), so a peer
process reads what the engine holds; each is an operation of ``ferrex.registry`` (its entry
names the URI).
"""

from __future__ import annotations

import json
import re
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from ferrex import registry
from ferrex.core.errors import FerrexError

PRIMER = "memory-primer"
RESOURCE_NOT_FOUND = -32002  # the MCP specification's code for an unknown resource
_JSON = "application/json"
# The operations that answer a resource (``ferrex.registry``: its URI, title, description).
_ANSWERING = tuple(op for op in registry.OPERATIONS if op.resource is not None)


def _resource(operation: registry.Operation) -> registry.Resource:
    assert operation.resource is not None
    return operation.resource


RESOURCES = [
    types.Resource(
        uri=spec.uri,
        name=op.name,
        title=spec.title,
        description=spec.description,
        mime_type=_JSON,
    )
    for op in _ANSWERING
    if not (spec := _resource(op)).is_template
]

TEMPLATES = [
    types.ResourceTemplate(
        uri_template=spec.uri,
        name=op.name,
        title=spec.title,
        description=spec.description,
        mime_type=_JSON,
    )
    for op in _ANSWERING
    if (spec := _resource(op)).is_template
]


def _pattern(template: str) -> re.Pattern[str]:
    """A URI template as a pattern: each ``{name}`` is one path segment."""
    parts = re.split(r"\{(\w+)\}", template)
    pattern = "".join(
        re.escape(part) if i % 2 == 0 else f"(?P<{part}>[^/?#]+)" for i, part in enumerate(parts)
    )
    return re.compile(f"^{pattern}$")


_MATCHERS = [(op.name, _pattern(_resource(op).uri)) for op in _ANSWERING]

PROMPTS = [
    types.Prompt(
        name=PRIMER,
        title="Memory primer",
        description="Primes an agent at the start of a session: what to store and how, when to "
        "recall, how to read freshness and contradictions.",
        arguments=[
            types.PromptArgument(
                name="namespace",
                description="the project namespace to work in (default: the server's)",
                required=False,
            )
        ],
    )
]


def primer_text(namespace: str | None = None) -> str:
    where = (
        f'Work in the namespace "{namespace}": pass namespace="{namespace}" to every call.\n\n'
        if namespace
        else ""
    )
    return (
        "You have a long-term memory (ferrex) that persists across sessions. Use it.\n\n"
        + where
        + "Start: call stats once for a brief overview (total, recent memories, what needs "
        "attention).\n\n"
        "Recall before you answer anything about past work, known facts, decisions or "
        "workflows: call recall with a specific question (filter with types, entities or "
        "time_range when you know them). Do not guess what you may have stored.\n\n"
        "Store as you learn, one self-contained memory per call (it must make sense with no "
        "surrounding conversation: name the project, the thing, the outcome):\n"
        "- an event (what happened, when, where, why) as episodic: content, optionally "
        "timestamp and context;\n"
        "- a stable fact as semantic: subject, predicate, object (e.g. api-server / uses / "
        "tokio 1.38), with confidence when unsure; a new value for the same subject and "
        "predicate supersedes the old one, which stays in the history;\n"
        "- a workflow as procedural: name, conditions, steps; storing the same name again "
        "makes a new version.\n"
        "Add entities (the people, services, libraries involved) so recall can filter on "
        "them. A near-duplicate is refused with code duplicate and the id it duplicates: "
        "pass supersedes=<id> to replace that memory instead.\n\n"
        "Read every recall result's freshness: fresh is current; aging deserves a check; "
        "stale or superseded may be outdated, so say so or confirm it before relying on it. "
        "Stale memories are held back unless you pass include_stale=true, and the answer "
        "says how many were. A result with contradiction=true disagrees with another current "
        "fact that is returned with it: do not pick one silently; ask, or resolve it with "
        "store(..., supersedes=id) or forget.\n\n"
        "Now and then (end of a long session), call reflect to review stale memories and "
        "contradictions; confirm what is still true with reflect(confirm_ids=[...]) and "
        "forget what is wrong."
    )


def get_prompt(name: str, arguments: dict[str, str] | None) -> types.GetPromptResult:
    if name != PRIMER:
        raise MCPError(types.INVALID_PARAMS, f"unknown prompt '{name[:40]}'; prompts: {PRIMER}")
    namespace = (arguments or {}).get("namespace") or None
    return types.GetPromptResult(
        description="How to use ferrex memory in this session",
        messages=[
            types.PromptMessage(
                role="user", content=types.TextContent(type="text", text=primer_text(namespace))
            )
        ],
    )


def resource_call(uri: str, default_namespace: str) -> tuple[str, dict[str, Any]]:
    """The engine operation (and its arguments) that answers a resource URI: a template's
    values, and this process's default namespace."""
    for op, pattern in _MATCHERS:
        match = pattern.match(uri)
        if match:
            return op, {"namespace": default_namespace, **match.groupdict()}
    known = ", ".join([*(r.uri for r in RESOURCES), *(t.uri_template for t in TEMPLATES)])
    raise MCPError(RESOURCE_NOT_FOUND, f"unknown resource '{uri[:80]}'; resources: {known}")


def resource_contents(uri: str, payload: Any) -> types.ReadResourceResult:
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str)
    return types.ReadResourceResult(
        contents=[types.TextResourceContents(uri=uri, mime_type=_JSON, text=text)]
    )


def resource_error(uri: str, error: FerrexError) -> MCPError:
    """A refusal (an unknown memory id, a store that cannot open) as a JSON-RPC error."""
    code = RESOURCE_NOT_FOUND if error.code in ("not_found", "invalid_params") else -32603
    return MCPError(code, f"{error.code}: {error.message}", {"uri": uri, "code": error.code})
