"""Reading the store as it is, without a query: one memory by id, the namespaces and their
counts (what the MCP resources show). Read-only: looking at a memory is not an access."""

from __future__ import annotations

from ferrex.core import errors
from ferrex.core.deps import Deps
from ferrex.core.errors import FerrexError
from ferrex.core.ids import MEMORY_ID_PATTERN
from ferrex.core.lifecycle.staleness import assess, effective_confidence
from ferrex.core.memory import MEMORY_TYPES, MemoryType
from ferrex.core.results import MemoryView, NamespaceCounts


class Lookup:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    def memory(self, memory_id: str) -> MemoryView:
        """One memory with its freshness; ``not_found`` for an id the store does not hold."""
        if not MEMORY_ID_PATTERN.match(memory_id):
            raise FerrexError(
                errors.INVALID_PARAMS,
                "a memory id is letters, digits and _:.- (as recall returns them), at most 80 "
                "characters",
            )
        memory = self.deps.meta.get_memory(memory_id)
        if memory is None:
            raise FerrexError(
                errors.NOT_FOUND, f"no memory with id '{memory_id}'; find ids with the recall tool"
            )
        now, staleness = self.deps.now(), self.deps.settings.staleness
        confidence = (
            effective_confidence(memory, now, staleness)
            if memory.type is MemoryType.SEMANTIC
            else None
        )
        return MemoryView(memory, assess(memory, now, staleness), confidence)

    def namespaces(self) -> list[NamespaceCounts]:
        out = []
        for name in self.deps.meta.namespaces():
            counts = self.deps.meta.count_by_type(name)
            by_type = {kind: int(counts.get(kind, 0)) for kind in MEMORY_TYPES}
            out.append(NamespaceCounts(name, sum(by_type.values()), by_type))
        return out
