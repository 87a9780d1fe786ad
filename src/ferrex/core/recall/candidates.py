"""The page's candidates: the fused list read in order, each candidate's row read (in growing
chunks, only as far as a candidate can still reach the page), what the request leaves out
dropped, each candidate's freshness assessed, and the stale ones kept apart."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from ferrex.config.core import CoreSettings
from ferrex.core.lifecycle.staleness import STALE, Freshness, assess, effective_confidence
from ferrex.core.memory import Memory, MemoryType
from ferrex.core.ports import MemoryRows
from ferrex.core.recall import current_state, period
from ferrex.core.recall.answer_type import LIFTS_FROM, AnswerType, asked_for, bonus
from ferrex.core.recall.current_state import asks_current
from ferrex.core.recall.filters import Scope
from ferrex.core.recall.formulas import Candidate, logit, sigmoid
from ferrex.core.recall.records import Scored
from ferrex.core.requests import RecallRequest
from ferrex.core.results import RecallHit


@dataclass
class Page:
    """The candidates admitted (fused order), their rows and freshness, and the stale ones."""

    rows: dict[str, Memory] = field(default_factory=dict)
    candidates: list[Candidate] = field(default_factory=list)
    freshness: dict[str, Freshness] = field(default_factory=dict)
    stale: list[Candidate] = field(default_factory=list)
    # Whether the floor left a candidate out while reading.
    floored: bool = False
    # The admitted candidates' relevance as they arrived (before an answer-type lift): what
    # the pruning bound compares with.
    arrived: list[float] = field(default_factory=list)


class _Rows:
    """The candidates' rows, read in chunks (``limit + 8`` first, then twice as many each time)
    from the first not read yet; all at once when nothing is pruned. For a question about the
    present state, also which of the facts read superseded an earlier value (``changed``)."""

    def __init__(
        self,
        meta: MemoryRows,
        entries: list[Scored],
        rows: dict[str, Memory],
        chunk: int,
        *,
        current: bool,
    ) -> None:
        self.meta = meta
        self.entries = entries
        self.rows = rows
        self.chunk = chunk
        self.current = current
        self.fetched: set[str] = set()
        self.changed: set[str] = set()

    def row(self, rank: int, prunable: bool) -> Memory | None:
        memory_id = self.entries[rank - 1].memory_id
        if memory_id not in self.fetched:
            span = self.entries[rank - 1 : rank - 1 + self.chunk] if prunable else self.entries
            wanted = [e.memory_id for e in span if e.memory_id not in self.fetched]
            read = self.meta.get_memories(wanted)
            self.rows.update(read)
            self.fetched.update(wanted)
            if self.current:
                facts = [i for i, m in read.items() if m.type is MemoryType.SEMANTIC]
                self.changed.update(self.meta.superseding(facts) if facts else ())
            self.chunk *= 2
        return self.rows.get(memory_id)


def admit(
    meta: MemoryRows,
    settings: CoreSettings,
    entries: list[Scored],
    request: RecallRequest,
    scope: Scope,
    *,
    limit: int,
    floor: float,
    margin: float,
    prunable: bool,
    now: datetime,
    lifts: Lifts | None = None,
) -> Page:
    """Candidates arrive by relevance (score fusion, no cross-encoder): one under the floor
    is never returned, nor one whose relevance's log-odds are more than the recency ``margin``
    under its ``limit``-th candidate's (no boost can lift it past that one: core/recall/formulas.py
    ``order_key``). Rows are read and assessed only up to there (``prunable``). A memory that
    holds the answer type the question asks for (``asked``) and is at least ``LIFTS_FROM``
    relevant gains ``retrieval.answer_type_bonus`` logits of relevance (answer_type.py), and so
    on for the question's other ``lifts`` (``Lifts``). The bound allows for those lifts
    too while candidates are that relevant, so what comes first never depends on ``limit``; it
    keeps comparing relevance as it arrived."""
    page = Page()
    lifts = lifts or Lifts()
    rows = _Rows(meta, entries, page.rows, limit + 8, current=lifts.changed > 0)
    for rank, record in enumerate(entries, start=1):
        reach = margin + lifts.reach(record.relevance)
        verdict = _pruned(record, page, limit, floor, reach) if prunable else None
        if verdict == "stop":
            break
        if verdict == "skip":
            continue
        memory = rows.row(rank, prunable)
        if memory is None or not _asked_for(memory, record, request, scope):
            continue
        fresh = assess(memory, now, settings.staleness)
        candidate = _candidate(record, rank, request.explain)
        lifts.apply(candidate, memory, record.memory_id in rows.changed, request.explain)
        if fresh.staleness == STALE and not request.include_stale:
            page.stale.append(candidate)
            continue
        page.freshness[record.memory_id] = fresh
        page.candidates.append(candidate)
        page.arrived.append(record.relevance)
    return page


@dataclass(frozen=True)
class Lifts:
    """What the question's words lift: the answer type it asks for (``typed`` logits,
    answer_type.py); for a question about the present state, a current fact that superseded an
    earlier value (``changed`` logits, current_state.py); for a question that names a period,
    an event of that period (``dated`` logits, period.py). None of them with a cross-encoder's
    order or RRF fusion: they raise the relevance shown, not the order."""

    asked: AnswerType | None = None
    typed: float = 0.0
    changed: float = 0.0
    named: period.Period | None = None
    dated: float = 0.0

    @classmethod
    def of(cls, settings: CoreSettings, request: RecallRequest, now: datetime) -> Lifts:
        """The lifts ``request``'s question earns (none of the time ones with ``as_of``; no
        named period with ``time_range``: the request already says when)."""
        cfg = settings.retrieval
        asked = asked_for(request.query)
        historical = request.as_of is not None
        current = cfg.current_state_bonus > 0 and asks_current(request.query, historical=historical)
        named = None
        if cfg.named_period_bonus > 0 and not historical and request.time_range is None:
            named = period.named_period(request.query, now)
        return cls(
            asked,
            cfg.answer_type_bonus if asked is not None else 0.0,
            cfg.current_state_bonus if current else 0.0,
            named,
            cfg.named_period_bonus if named is not None else 0.0,
        )

    def reach(self, relevance: float) -> float:
        """The most a candidate of ``relevance`` can gain (what the pruning bound allows)."""
        gain = self.typed if relevance >= LIFTS_FROM else 0.0
        gain += self.changed if relevance >= current_state.LIFTS_FROM else 0.0
        return gain + (self.dated if relevance >= period.LIFTS_FROM else 0.0)

    def apply(self, candidate: Candidate, memory: Memory, changed: bool, explain: bool) -> None:
        """Lift ``candidate``'s relevance by what its memory earns (marked for ``explain``)."""
        relevance = candidate.relevance
        typed = bonus(memory, relevance, self.asked, self.typed)
        now = current_state.bonus(memory, relevance, changed, self.changed)
        dated = period.bonus(memory, relevance, self.named, self.dated)
        if not (typed or now or dated):
            return
        candidate.relevance = sigmoid(logit(relevance) + typed + now + dated)
        if explain and typed:
            candidate.extra["answer_type"] = self.asked
        if explain and now:
            candidate.extra["current_state"] = True
        if explain and dated:
            candidate.extra["named_period"] = True


def _pruned(
    record: Scored, page: Page, limit: int, floor: float, margin: float
) -> Literal["skip", "stop"] | None:
    """Whether a candidate cannot reach the page: "skip" it, "stop" reading, or None.

    With late interaction (no cross-encoder) the floor, like the gate, judges the two-channel
    relevance it was chosen on: late interaction orders and scores the candidates, it does not
    drop one the cosine and BM25 evidence keeps (a paraphrase shares no token with the question:
    its MaxSim is low, its cosine is not). (With a cross-encoder: those past its window, which
    it did not score.)"""
    basis = record.gate_relevance
    if basis is not None and basis < floor:
        page.floored = True
        return "skip"  # (the page is ordered by the late relevance, not by this)
    if basis is None and record.relevance < floor:
        page.floored = True
        return "stop"
    if len(page.arrived) >= limit and (
        logit(record.relevance) + margin < logit(page.arrived[limit - 1])
    ):
        return "stop"
    return None


def _asked_for(memory: Memory, record: Scored, request: RecallRequest, scope: Scope) -> bool:
    if memory.namespace != scope.namespace:
        return False  # (never) another namespace
    if request.version is not None and memory.version != request.version:
        return False
    # A neighbour of another type than the recall asked for.
    return not (
        record.neighbour_of is not None and scope.types and memory.type.value not in scope.types
    )


def _candidate(record: Scored, rank: int, explain: bool) -> Candidate:
    candidate = Candidate(record.memory_id, record.score, rank, record.dense_rank, record.bm25_rank)
    candidate.relevance = record.relevance
    candidate.floor_basis = record.gate_relevance
    candidate.context_of = record.context_of
    if explain:
        candidate.extra.update(
            cosine=None if record.cosine is None else round(record.cosine, 6),
            bm25=None if record.bm25 is None else round(record.bm25, 6),
            bm25_norm=round(record.bm25_norm, 6),
        )
        if record.late is not None:
            candidate.extra["late"] = round(record.late, 6)
        if record.gate_relevance is not None:  # what the answer gate judged
            candidate.extra["gate_relevance"] = round(record.gate_relevance, 6)
    if record.neighbour_of is not None:
        candidate.extra["neighbour_of"] = record.neighbour_of
    if record.below_bm25_floor:
        # Ranked by BM25, but under the relative floor: not counted in the fused score.
        candidate.extra["bm25_below_floor"] = True
    return candidate


def hit_of(
    settings: CoreSettings,
    memory: Memory,
    candidate: Candidate,
    fresh: Freshness,
    explain: bool,
    now: datetime,
) -> RecallHit:
    """A candidate as a result of the answer."""
    return RecallHit(
        memory=memory,
        score=candidate.final_score,
        freshness=fresh,
        effective_confidence=effective_confidence(memory, now, settings.staleness)
        if memory.type is MemoryType.SEMANTIC
        else None,
        explain=candidate.explain() if explain else None,
    )
