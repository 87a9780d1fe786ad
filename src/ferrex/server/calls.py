"""One tool call in process: parse the arguments into the tool's request model, run its use
case, present the result. The engine runs every MCP call (its own and its peers') through
``run_tool``; import and benchmarks use ``store_many``."""

from __future__ import annotations

from typing import Any

from ferrex.core.errors import FerrexError
from ferrex.core.requests import (
    ForgetRequest,
    RecallRequest,
    ReflectRequest,
    StatsRequest,
    StoreRequest,
    parse,
)
from ferrex.core.service import MemoryService
from ferrex.server.presenter import present, present_store_many

TOOL_OPS = ("store", "recall", "forget", "reflect", "stats")
# The writes recorded under a forwarded call's key (exactly-once on retry); reflect's actions
# (confirm, pin, unpin) give the same result when applied twice.
KEYED_OPS = ("store", "forget")
REQUESTS: dict[str, Any] = {
    "store": StoreRequest,
    "recall": RecallRequest,
    "forget": ForgetRequest,
    "reflect": ReflectRequest,
    "stats": StatsRequest,
}


def parse_tool(service: MemoryService, tool: str, arguments: Any) -> Any:
    """A tool's arguments as its request model (``FerrexError`` with the code if invalid)."""
    settings = service.settings
    return parse(
        REQUESTS[tool],
        arguments,
        settings.limits,
        tool,
        max_limit=settings.retrieval.max_limit,
    )


def run_tool(
    service: MemoryService, tool: str, arguments: Any, key: str | None = None
) -> dict[str, Any]:
    """One tool call: parse the arguments, run the use case, present its result. ``key``: the
    idempotency key of a write forwarded by another ferrex process (store, forget)."""
    request = parse_tool(service, tool, arguments)
    use_case = getattr(service, tool)
    if key is not None and tool in KEYED_OPS:
        return present(tool, use_case(request, key))
    return present(tool, use_case(request))


def store_many(service: MemoryService, items: list[Any], batch: int = 256) -> list[dict[str, Any]]:
    """Many store calls in one pipeline (import, benchmarks): one answer per item, an
    ``{"error": ...}`` for an item refused."""
    parsed: list[Any] = []
    for item in items:
        try:
            parsed.append(parse_tool(service, "store", item))
        except FerrexError as exc:
            parsed.append(exc)
    return present_store_many(service.store_many(parsed, batch))
