"""The tools' answers as models: their output schemas are generated from these (through
``server/schemas.py``'s simplifier), as the input schemas are from the request models.

``server/presenter.py`` builds the answers; a field left out of an answer (``None`` here) is
absent, never null, unless it is declared nullable without a default (a freshness's
``last_accessed``). Answers may carry more than is declared (``extra="allow"``): the
schemas name what an agent acts on, and every answer, errors included, stays valid for
clients that check structured content against them (the TypeScript SDK does).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

TypeName = Literal["episodic", "semantic", "procedural"]
Staleness = Literal["fresh", "aging", "stale", "superseded"]


class _Answer(BaseModel):
    model_config = ConfigDict(extra="allow")


# ---------------------------------------------------------------------- store


class StoreAnswer(_Answer):
    id: str
    type: TypeName
    status: Literal["stored", "duplicate", "superseded", "historical", "contradiction", "ended"]
    superseded: list[str] | None = None
    contradicts: list[str] | None = None
    evicted: int | None = None


# ---------------------------------------------------------------------- recall


class Freshness(_Answer):
    age_days: int
    last_accessed: str | None
    last_validated: str | None
    access_count: int
    staleness: Staleness


class RecallItem(_Answer):
    id: str
    type: TypeName
    content: str
    score: float = Field(ge=0, le=1)
    freshness: Freshness
    contradiction: bool | None = None
    contradicts: list[str] | None = None
    included_as: Literal["contradiction", "neighbour"] | None = None


class RecallAnswer(_Answer):
    results: list[RecallItem]
    stale_held_back: int | None = None
    truncated: int | None = None
    no_results: str | None = None


# ---------------------------------------------------------------------- forget


class ForgetAnswer(_Answer):
    deleted: list[str]
    not_found: list[str]
    entities_removed: list[str] | None = None


# ---------------------------------------------------------------------- reflect


class ReviewItem(_Answer):
    id: str
    type: TypeName
    summary: str
    staleness: Staleness
    age_days: int
    days_since_validation: int
    reasons: list[str]


class ContradictingFact(_Answer):
    id: str
    object: str | None
    confidence: float | None
    t_valid: str | None


class Contradiction(_Answer):
    subject: str | None
    predicate: str | None
    facts: list[ContradictingFact]


class ForgetCandidate(_Answer):
    id: str
    type: TypeName
    summary: str
    access_count: int
    relevance: float
    age_days: int


class AliasCandidate(_Answer):
    name: str
    entity: str
    entity_id: int
    score: float


class InactiveEntity(_Answer):
    name: str
    last_reference: str | None
    memories: int


class ReflectAnswer(_Answer):
    namespace: str
    needs_review: list[ReviewItem] | None = None
    contradictions: list[Contradiction] | None = None
    forget_candidates: list[ForgetCandidate]
    alias_candidates: list[AliasCandidate] | None = None
    inactive_entities: list[InactiveEntity] | None = None


# ---------------------------------------------------------------------- stats


class RecentMemory(_Answer):
    id: str
    type: TypeName
    summary: str
    age_days: int


class Attention(_Answer):
    stale_count: int
    conflict_count: int
    unvalidated_count: int


class StatsAnswer(_Answer):
    total: int
    recent: list[RecentMemory]
    needs_attention: Attention
    counts: dict[str, Any] | None = None
    staleness: dict[str, Any] | None = None
    conflicts: int | None = None
    entities: int | None = None
    storage_mb: float | None = None
    disk_mb: float | None = None
    free_mb: float | None = None
