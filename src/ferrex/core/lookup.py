"""Reading the store as it is, without a query: one memory by id, the namespaces and their
counts (what the MCP resources show). Read-only: looking at a memory is not an access."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ferrex.config import StalenessConfig
from ferrex.core import errors
from ferrex.core.errors import FerrexError
from ferrex.core.ids import MEMORY_ID_PATTERN
from ferrex.core.memory import MEMORY_TYPES, Memory
from ferrex.core.ports import MetadataStore
from ferrex.core.staleness import Freshness, assess, effective_confidence


@dataclass(frozen=True)
class MemoryView:
    memory: Memory
    freshness: Freshness
    effective_confidence: float | None  # facts only


@dataclass(frozen=True)
class NamespaceCounts:
    name: str
    total: int
    by_type: dict[str, int]


def memory_view(
    meta: MetadataStore, memory_id: str, now: datetime, staleness: StalenessConfig
) -> MemoryView:
    """One memory with its freshness; ``not_found`` for an id the store does not hold."""
    if not MEMORY_ID_PATTERN.match(memory_id):
        raise FerrexError(
            errors.INVALID_PARAMS,
            "a memory id is letters, digits and _:.- (as recall returns them), at most 80 "
            "characters",
        )
    memory = meta.get_memory(memory_id)
    if memory is None:
        raise FerrexError(
            errors.NOT_FOUND,
            f"no memory with id '{memory_id}'; find ids with the recall tool",
        )
    confidence = (
        effective_confidence(memory, now, staleness) if memory.type.value == "semantic" else None
    )
    return MemoryView(memory, assess(memory, now, staleness), confidence)


def namespace_counts(meta: MetadataStore) -> list[NamespaceCounts]:
    out = []
    for name in meta.namespaces():
        counts = meta.count_by_type(name)
        by_type = {kind: int(counts.get(kind, 0)) for kind in MEMORY_TYPES}
        out.append(NamespaceCounts(name, sum(by_type.values()), by_type))
    return out
