"""What a recall searches: its entities resolved to ids, and the ``IndexFilter`` of its request
(namespace, types, entities, time range, validity, a past moment)."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from datetime import datetime

from ferrex.core.matching.entities import EntityResolver
from ferrex.core.ports import IndexFilter
from ferrex.core.requests import RecallRequest


@dataclass(frozen=True)
class Scope:
    """A recall's filter and what the later stages ask of it."""

    flt: IndexFilter
    types: tuple[str, ...]
    entity_ids: tuple[int, ...] | None
    validity: str
    # Entity names the request gave that name no known entity (reported in the answer).
    unresolved: list[str]
    # A filter that selects (a time range with a bound, entities) does the choosing: the query
    # only orders what it selected, so neither the floor nor the gate drops any of it ("what
    # happened" over last week lists last week's events; scores stay the query's relevance).
    # ``types`` and ``version`` narrow without selecting (every unedited procedure is
    # version 1).
    selecting: bool

    @property
    def namespace(self) -> str:
        return self.flt.namespace


def resolve_entities(
    entities: EntityResolver, namespace: str, names: list[str] | None, now: datetime
) -> tuple[tuple[int, ...] | None, list[str]]:
    """The ids of the named entities (None: no entity asked for), and the names none has."""
    unresolved: list[str] = []
    if not names:
        return None, unresolved
    resolved: list[int] = []
    for name in names:
        resolution = entities.resolve(namespace, name, create=False, at=now)
        if resolution.entity_id is None:
            unresolved.append(name)
        else:
            resolved.append(resolution.entity_id)
    return tuple(sorted(set(resolved))), unresolved


def scope_of(
    request: RecallRequest,
    namespace: str,
    model: str,
    entities: EntityResolver,
    now: datetime,
) -> Scope:
    entity_ids, unresolved = resolve_entities(entities, namespace, request.entities, now)
    types = tuple(request.types or ())
    validity = "all" if request.include_invalidated or request.version else "current"
    if request.version is not None:
        types = ("procedural",)
    flt = IndexFilter(
        model=model,
        namespace=namespace,
        types=types,
        entity_ids=entity_ids,
        time_after=request.time_range.after if request.time_range else None,
        time_before=request.time_range.before if request.time_range else None,
        validity=validity,  # type: ignore[arg-type]
        as_of=request.as_of,
    )
    selecting = flt.time_after is not None or flt.time_before is not None or bool(request.entities)
    return Scope(flt, types, entity_ids, validity, unresolved, selecting)


def cache_params(request: RecallRequest, scope: Scope, prefetch: int) -> tuple[Hashable, ...]:
    """Every parameter the retrieval stage's output depends on (the recall cache's key, with
    the namespace, its generation and the query embedding's hash)."""
    return (
        # The exact text too: the cross-encoder scores (cached with the candidates) see the
        # raw query, which an uncased embedding of two spellings would not tell apart.
        request.query,
        scope.types,
        scope.entity_ids,
        scope.flt.time_after,
        scope.flt.time_before,
        scope.validity,
        request.as_of,
        request.explain,
        prefetch,
        request.version,
    )
