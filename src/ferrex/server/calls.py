"""One operation in process: parse the arguments into the operation's request model, run its
use case, present the result (``ferrex.registry`` names all three). The engine runs every
call (its own and its peers') through ``run_operation``; import and benchmarks use
``store_many``."""

from __future__ import annotations

from typing import Any

from ferrex import registry
from ferrex.core import errors
from ferrex.core.errors import FerrexError
from ferrex.core.requests import parse
from ferrex.core.service import MemoryService
from ferrex.server.presenter import present_store_many


def operation(name: str) -> registry.Operation:
    found = registry.get(name)
    if found is None:
        raise FerrexError(errors.UNKNOWN_TOOL, f"unknown operation '{name[:40]}'")
    return found


def parse_tool(service: MemoryService, tool: str, arguments: Any) -> Any:
    """An operation's arguments as its request model (``FerrexError`` with the code if
    invalid); the arguments as sent for an operation without one."""
    model = operation(tool).request
    if model is None:
        return arguments
    settings = service.settings
    return parse(
        registry.resolve(model),
        arguments,
        settings.limits,
        tool,
        max_limit=settings.retrieval.max_limit,
    )


def run_operation(service: MemoryService, name: str, arguments: Any, key: str | None = None) -> Any:
    """One call: parse the arguments, run the use case, present its result. ``key``: the
    idempotency key of a write forwarded by another ferrex process (store, forget)."""
    spec = operation(name)
    request = parse_tool(service, name, arguments)
    use_case = registry.resolve(spec.use_case)
    if key is not None and spec.keyed:
        result = use_case(service, request, key)
    else:
        result = use_case(service, request)
    return registry.resolve(spec.present)(result) if spec.present is not None else result


def run_tool(
    service: MemoryService, tool: str, arguments: Any, key: str | None = None
) -> dict[str, Any]:
    """One tool call (an operation whose answer is a JSON object)."""
    answer: dict[str, Any] = run_operation(service, tool, arguments, key)
    return answer


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
