"""What each use case returns: typed results, no presentation.

The server's presenter (``ferrex.server.presenter``) decides what the agent reads from these;
core never builds answer dicts. Timestamps are datetimes, memories are ``Memory`` rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from ferrex.core.lifecycle.staleness import Freshness
from ferrex.core.memory import Memory, MemoryType
from ferrex.core.secrets.scanner import Redaction


class Outcome(StrEnum):
    """What a store did (the answer's ``status``)."""

    STORED = "stored"
    DUPLICATE = "duplicate"
    SUPERSEDED = "superseded"
    HISTORICAL = "historical"
    CONTRADICTION = "contradiction"
    ENDED = "ended"


@dataclass(frozen=True)
class EntityLink:
    """A name given with a store, resolved to an entity of the namespace."""

    name: str
    entity_id: int
    resolved_by: str


@dataclass(frozen=True)
class PossibleAlias:
    """A current fact kept beside the stored one: its subject or predicate (``field``) only
    looks like this one's (``name`` here, ``other`` there), so nothing was superseded."""

    id: str
    field: str
    name: str
    other: str
    subject: str | None
    predicate: str | None
    object: str | None


@dataclass
class StoreOutcome:
    """One store: the memory it names (new, or the existing one for a duplicate / an ended
    fact), what happened, and every other memory it changed."""

    id: str
    type: MemoryType
    namespace: str
    status: Outcome = Outcome.STORED
    # what it changed
    superseded: list[str] = field(default_factory=list)  # closed by this store
    superseded_by: str | None = None  # stored as history: the current value that replaced it
    also_current: list[str] = field(default_factory=list)  # values that stay current beside it
    contradicts: list[str] = field(default_factory=list)
    validated: list[str] = field(default_factory=list)  # memories confirmed by citing them
    duplicate_of: str | None = None
    confirmed: bool = False  # a duplicate fact: the existing one was confirmed (last_validated)
    evicted: int = 0  # other memories evicted by the budget / retention after this store
    # details
    predicate_canonical: str | None = None
    predicate_resolved_by: str | None = None
    similarity: float | None = None  # a fact's object similarity to the value it matched
    similarity_method: str | None = None
    confidence: float | None = None  # a confirmed duplicate's confidence now
    multi_valued: bool = False
    t_invalid: datetime | None = None  # an ended fact: when it stopped being true
    version: int | None = None
    previous_version_id: str | None = None
    previous_version: int | None = None
    rolled_back_to: int | None = None
    possible_alias: list[PossibleAlias] = field(default_factory=list)
    entities: list[EntityLink] = field(default_factory=list)
    chunks: int = 1
    pinned: bool = False
    warnings: list[str] = field(default_factory=list)
    # Secrets taken out before storing: kind and field, never the value.
    redacted: list[Redaction] = field(default_factory=list)

    def named_ids(self) -> list[str]:
        """Every memory id this outcome names (never evicted by the store that wrote it)."""
        ids = [self.id, *self.superseded, *self.also_current, *self.contradicts, *self.validated]
        ids += [alias.id for alias in self.possible_alias]
        ids += [i for i in (self.duplicate_of, self.superseded_by, self.previous_version_id) if i]
        return ids


@dataclass
class RecallHit:
    """One memory in a recall answer."""

    memory: Memory
    score: float
    freshness: Freshness
    effective_confidence: float | None = None  # semantic facts (confidence decay)
    contradicts: list[str] = field(default_factory=list)  # other current values (Layer 4)
    # "contradiction": a partner added after the ranked page; "neighbour": context of a hit
    included_as: str | None = None
    explain: dict[str, Any] | None = None


@dataclass
class RecallResult:
    hits: list[RecallHit]
    namespace: str
    reranked: bool
    score_basis: str  # "rerank" | "fused"
    stale_held_back: int = 0
    rerank_status: str | None = None  # why not reranked
    truncated: int | None = None  # with max_tokens: results cut by the budget
    tokens: int | None = None
    unresolved_entities: list[str] = field(default_factory=list)
    cache_hit: bool | None = None  # explain only
    no_results: str | None = None  # why the answer is empty (the relevance floor, or nothing)


@dataclass
class ForgetResult:
    deleted: list[str]
    not_found: list[str]
    entities_removed: list[str]
    namespace: str
    history_without_successor: list[str] = field(default_factory=list)


@dataclass
class ReviewItem:
    memory: Memory
    freshness: Freshness
    reasons: list[str]
    days_since_validation: float
    effective_confidence: float | None


@dataclass
class ForgetCandidate:
    memory: Memory
    access_count: int
    relevance: float
    age_days: float


@dataclass
class AliasCandidate:
    name: str
    entity: str
    entity_id: int
    score: float


@dataclass
class InactiveEntity:
    name: str
    last_reference: Any
    memories: int


@dataclass
class ReflectActions:
    confirmed: list[str] | None = None
    pinned: list[str] | None = None
    unpinned: list[str] | None = None
    not_found: list[str] = field(default_factory=list)
    still_stale: list[str] = field(default_factory=list)


@dataclass
class ReflectReport:
    namespace: str
    actions: ReflectActions
    forget_candidates: list[ForgetCandidate]
    alias_candidates: list[AliasCandidate]
    inactive_entities: list[InactiveEntity]
    needs_review: list[ReviewItem] | None = None  # None: not asked (include_stale=false)
    needs_review_total: int = 0
    contradictions: list[list[Memory]] | None = None  # None: not asked


@dataclass(frozen=True)
class RecentMemory:
    id: str
    type: MemoryType
    summary: str
    age_days: int


@dataclass(frozen=True)
class Attention:
    stale_count: int
    conflict_count: int
    unvalidated_count: int


@dataclass
class StatsBrief:
    total: int
    recent: list[RecentMemory]
    needs_attention: Attention
    warnings: list[str] = field(default_factory=list)


@dataclass
class StatsDetailed(StatsBrief):
    namespace: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    staleness: dict[str, int] = field(default_factory=dict)
    superseded: int = 0
    conflicts: int = 0
    entities: int = 0
    storage_bytes: int = 0
    disk_bytes: int = 0
    free_bytes: int | None = None  # free space on the disk holding the store
    pinned: int = 0
    evictions_total: int = 0
    evictions_last_at: Any = None
    model: dict[str, Any] | None = None
    reranker: dict[str, Any] = field(default_factory=dict)
    index_mode: str = ""
    index_reason: str | None = None
    index_points: int = 0
    index_sidecar: dict[str, Any] | None = None
    index_background: dict[str, Any] | None = None
    # What the index's server lacks (an old Qdrant: no multivectors), said once in the log.
    index_limitations: list[str] = field(default_factory=list)
    # The late-interaction channel: on in the settings, and whether the index has it.
    late_interaction: dict[str, Any] = field(default_factory=dict)
    cache: dict[str, Any] = field(default_factory=dict)
    journal_backlog: int = 0


@dataclass(frozen=True)
class MemoryView:
    """One memory as it is (the ``ferrex://memory/{id}`` resource)."""

    memory: Memory
    freshness: Freshness
    effective_confidence: float | None  # facts only


@dataclass(frozen=True)
class NamespaceCounts:
    """A namespace and its memories by type (the ``ferrex://namespaces`` resource)."""

    name: str
    total: int
    by_type: dict[str, int]
