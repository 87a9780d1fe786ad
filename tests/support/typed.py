"""In-process tool calls that return the use case's typed result instead of the agent's answer:
for tests that check what a call did beyond what the agent is shown (entity and predicate
resolution, similarity, chunking, the stored memory's fields)."""

from __future__ import annotations

from typing import Any

from ferrex.core.results import RecallResult, StoreOutcome
from ferrex.core.service import MemoryService
from ferrex.server.calls import parse_tool


def stored(service: MemoryService, arguments: dict[str, Any]) -> StoreOutcome:
    return service.store(parse_tool(service, "store", arguments))


def recalled(service: MemoryService, arguments: dict[str, Any]) -> RecallResult:
    return service.recall(parse_tool(service, "recall", arguments))
