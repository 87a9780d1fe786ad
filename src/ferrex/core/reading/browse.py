"""Reading the store without a query, for a person looking at it (``ferrex ui``): a page of
memories filtered and sorted, one memory's history (a fact's values over time, a procedure's
versions, contradiction partners) and the store's growth over time.

Read-only: looking is not an access (nothing here bumps ``last_accessed``) and nothing is
written. Each read goes through the metadata store's port, as the tools' use cases do.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import Field, StrictBool, StrictInt, field_validator

from ferrex.core.deps import Deps
from ferrex.core.lifecycle.staleness import Freshness, assess
from ferrex.core.memory import MEMORY_TYPES, Memory, MemoryType
from ferrex.core.ports import RowValidity
from ferrex.core.reading.lookup import Lookup
from ferrex.core.requests import TypeName, _Request, validate_namespace
from ferrex.core.results import MemoryView

MAX_PAGE_SIZE = 200
MAX_PAGE = 100_000
STALENESS_LEVELS = ("fresh", "aging", "stale", "superseded")
# SQL ORDER BY for each sort (fixed code, never input): the memory's own time (an event's
# timestamp, a fact's t_valid, else when it was stored), or by type then that time.


class BrowseRequest(_Request):
    namespace: str | None = None
    types: list[TypeName] | None = None
    staleness: Literal["fresh", "aging", "stale", "superseded"] | None = None
    include_invalidated: StrictBool = False
    sort: Literal["date", "stored", "type"] = "date"
    page: StrictInt = Field(default=1, ge=1, le=MAX_PAGE)
    page_size: StrictInt = Field(default=50, ge=1, le=MAX_PAGE_SIZE)

    @field_validator("namespace", mode="before")
    @classmethod
    def _check_namespace(cls, value: Any) -> Any:
        return None if value is None else validate_namespace(value)


class HistoryRequest(_Request):
    id: str = Field(max_length=200)


class ActivityRequest(_Request):
    namespace: str | None = None

    @field_validator("namespace", mode="before")
    @classmethod
    def _check_namespace(cls, value: Any) -> Any:
        return None if value is None else validate_namespace(value)


@dataclass(frozen=True)
class BrowseItem:
    memory: Memory
    freshness: Freshness


@dataclass(frozen=True)
class BrowsePage:
    namespace: str
    items: list[BrowseItem]
    total: int
    page: int
    page_size: int


@dataclass(frozen=True)
class History:
    """One memory and what it belongs to: ``kind`` is ``fact`` (every value its subject and
    predicate had, oldest first), ``procedure`` (every version, oldest first) or ``single``."""

    view: MemoryView
    kind: str
    versions: list[BrowseItem]
    contradicts: list[Memory] = field(default_factory=list)


@dataclass(frozen=True)
class Activity:
    """Memories stored per month (``YYYY-MM``) and type, current and superseded together."""

    namespace: str
    months: list[str]
    by_type: dict[str, list[int]]


class Browse:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    def page(self, request: BrowseRequest) -> BrowsePage:
        """Memories of a namespace, filtered by type, staleness and validity, sorted, paged."""
        namespace = request.namespace or self.deps.namespace
        validity: RowValidity = "all"
        if request.staleness == "superseded":
            validity = "ended"
        elif not request.include_invalidated:
            validity = "current"
        rows = self.deps.meta.browse_memories(
            namespace, types=list(request.types or []), validity=validity, sort=request.sort
        )
        now, config = self.deps.now(), self.deps.settings.staleness
        assessed = [(memory, assess(memory, now, config)) for memory in rows]
        if request.staleness is not None:
            assessed = [pair for pair in assessed if pair[1].staleness == request.staleness]
        start = (request.page - 1) * request.page_size
        shown = assessed[start : start + request.page_size]
        # The page's rows again, with their entity names (the scan above skipped them).
        full = self.deps.meta.get_memories([memory.id for memory, _ in shown])
        items = [BrowseItem(full.get(memory.id, memory), fresh) for memory, fresh in shown]
        return BrowsePage(namespace, items, len(assessed), request.page, request.page_size)

    def history(self, request: HistoryRequest) -> History:
        """A memory with its fact history or procedure versions and its contradiction partners
        (``not_found`` / ``invalid_params`` as the memory resource answers them)."""
        view = Lookup(self.deps).memory(request.id)
        memory = view.memory
        meta, now, config = self.deps.meta, self.deps.now(), self.deps.settings.staleness
        if (
            memory.type is MemoryType.SEMANTIC
            and memory.subject_entity_id is not None
            and memory.predicate_canonical
        ):
            values = meta.facts_for_predicate(
                memory.namespace, memory.subject_entity_id, memory.predicate_canonical
            )
            values.sort(key=lambda m: (_valid_from(m), m.created_at, m.id))
            partners = _partners(memory, values)
            items = [BrowseItem(m, assess(m, now, config)) for m in values]
            return History(view, "fact", items, partners)
        if memory.type is MemoryType.PROCEDURAL and memory.name:
            versions = meta.procedure_versions(memory.namespace, memory.name)
            items = [BrowseItem(m, assess(m, now, config)) for m in versions]
            return History(view, "procedure", items)
        return History(view, "single", [BrowseItem(memory, view.freshness)])

    def activity(self, request: ActivityRequest) -> Activity:
        """How the namespace grew: memories stored per month and type (every month from the
        first to the last, so a chart's gaps are real)."""
        namespace = request.namespace or self.deps.namespace
        rows = self.deps.meta.browse_memories(namespace, types=[], validity="all", sort="first")
        counts: Counter[tuple[str, str]] = Counter(
            (_month(memory.created_at), memory.type.value) for memory in rows
        )
        months = (
            _month_range(min(m for m, _ in counts), max(m for m, _ in counts)) if counts else []
        )
        by_type = {
            kind: [counts.get((month, kind), 0) for month in months] for kind in MEMORY_TYPES
        }
        return Activity(namespace, months, by_type)


def _valid_from(memory: Memory) -> datetime:
    return memory.t_valid or memory.event_time


def _partners(memory: Memory, values: list[Memory]) -> list[Memory]:
    """Current values of the same subject and predicate that say otherwise (a contradiction:
    both kept, flagged), when this fact is current and single-valued."""
    if memory.t_invalid is not None or memory.multi_valued:
        return []
    mine = " ".join((memory.object or "").lower().split())
    return [
        other
        for other in values
        if other.id != memory.id
        and other.t_invalid is None
        and not other.multi_valued
        and " ".join((other.object or "").lower().split()) != mine
    ]


def _month(moment: datetime) -> str:
    return f"{moment.year:04d}-{moment.month:02d}"


def _month_range(first: str, last: str) -> list[str]:
    year, month = int(first[:4]), int(first[5:])
    out = []
    while f"{year:04d}-{month:02d}" <= last:
        out.append(f"{year:04d}-{month:02d}")
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return out
