"""Query-time contradictions (Layer 4): single-valued facts of the results sharing subject and
predicate with other objects are flagged, and the other side of each joins the answer."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ferrex.config.core import CoreSettings
from ferrex.core.ingest import conflict as conflicts
from ferrex.core.lifecycle.staleness import STALE, assess
from ferrex.core.memory import Memory, MemoryType
from ferrex.core.ports import FactQueries
from ferrex.core.recall.candidates import hit_of
from ferrex.core.recall.formulas import Candidate
from ferrex.core.requests import RecallRequest
from ferrex.core.results import RecallHit


def flag(
    meta: FactQueries,
    namespace: str,
    memories: Sequence[Memory],
    results: list[RecallHit],
    as_of: datetime | None = None,
) -> list[tuple[Memory, list[str]]]:
    """Layer 4: single-valued facts sharing subject+predicate with other objects, all valid
    now (or all valid at ``as_of``: a value that only began later contradicts nothing then).

    Flags the results in place; returns the contradicting facts missing from the results,
    each with the result ids it contradicts."""

    def valid(fact: Memory) -> bool:
        if as_of is None:
            return fact.t_invalid is None
        start = fact.t_valid or fact.event_time
        return start <= as_of and (fact.t_invalid is None or fact.t_invalid > as_of)

    by_id = {r.memory.id: r for r in results}
    missing: dict[str, tuple[Memory, list[str]]] = {}
    seen: dict[tuple[int, str], list[Memory]] = {}
    for memory in memories:
        group_key = _group_key(memory)
        if group_key is None or not valid(memory):
            continue
        if group_key not in seen:
            seen[group_key] = [
                f
                for f in meta.facts_for_predicate(namespace, *group_key)
                if valid(f) and not f.multi_valued
            ]
        others = _other_values(memory, seen[group_key])
        if others:
            by_id[memory.id].contradicts = sorted(f.id for f in others)
            for other in others:
                if other.id not in by_id:
                    missing.setdefault(other.id, (other, []))[1].append(memory.id)
    return [(m, sorted(ids)) for _, (m, ids) in sorted(missing.items())]


def _group_key(memory: Memory) -> tuple[int, str] | None:
    """(subject, predicate) of a semantic fact of a single-valued predicate, with both
    resolved (None for any other memory)."""
    if (
        memory.type is not MemoryType.SEMANTIC
        or memory.multi_valued
        or memory.subject_entity_id is None
        or memory.predicate_canonical is None
    ):
        return None
    return memory.subject_entity_id, memory.predicate_canonical


def _other_values(memory: Memory, group: list[Memory]) -> list[Memory]:
    """The facts of its group holding another object than ``memory``."""
    own = conflicts.normalize_object(memory.object or "")
    return [
        f for f in group if f.id != memory.id and conflicts.normalize_object(f.object or "") != own
    ]


def join_partners(
    settings: CoreSettings,
    partners: list[tuple[Memory, list[str]]],
    request: RecallRequest,
    hits: list[RecallHit],
    held: set[str],
    now: datetime,
) -> None:
    """Layer 4: "both are returned with a contradiction flag" — the other side of each
    flagged contradiction joins the results (after them, score 0) if it was not there; a stale
    one is held back like any stale memory (the flag names it). Partners are today's facts: not
    added to a budgeted page, nor to a view of the past."""
    if (
        request.max_tokens is not None
        or request.as_of is not None
        or request.time_range is not None
    ):
        return
    for partner, against in partners:
        fresh = assess(partner, now, settings.staleness)
        if fresh.staleness == STALE and not request.include_stale:
            held.add(partner.id)
            continue
        extra = hit_of(
            settings, partner, Candidate(partner.id, 0.0, 0), fresh, request.explain, now
        )
        extra.contradicts = against
        extra.included_as = "contradiction"
        hits.append(extra)
