"""Operations the engine executes for its own MCP session, for peers and for operator commands."""

from __future__ import annotations

from typing import Any

from ferrex.core import errors
from ferrex.core.errors import FerrexError
from ferrex.core.maintenance import doctor, export_lines, import_records, rebuild
from ferrex.core.service import MemoryService

TOOL_OPS = ("store", "recall", "forget", "reflect", "stats")


def dispatch(service: MemoryService, op: str, arguments: dict[str, Any]) -> Any:
    if op in TOOL_OPS:
        return getattr(service, op)(arguments)
    if op == "ping":
        return {"ok": True}
    if op == "doctor":
        return doctor(service, repair=bool(arguments.get("repair")))
    if op == "export":
        return list(export_lines(service, arguments.get("namespace")))
    if op == "import":
        return import_records(service, list(arguments.get("records") or []))
    if op == "rebuild":
        return rebuild(service)
    raise FerrexError(errors.UNKNOWN_TOOL, f"unknown operation '{op[:40]}'")
