"""Memory lifecycle (spec "Memory Lifecycle"): decay and eviction.

Decay — decay_score in (0, 1] (how worth keeping a memory is; not recall's relevance):

    episodic:   2^(-d / H_eff),  d = days since max(creation, last validation),
                H_eff = H x (1 + 0.5 x ln(1 + access_count))   (H = 30 days by default)
    semantic:   1.0 (no time-based decay; staleness tracks validation instead)
    procedural: 1.0 (no decay)
    pinned:     1.0 (exempt)

Decay counts from when the memory was created (spec: "from creation/last-update time"; a row
is never edited in place, see core/lifecycle/staleness.py), not from an episode's event time:
an event from last spring stored today is a new memory.

Eviction order when the storage budget is exceeded (spec, with superseded episodes placed):
  1. superseded facts and episodes past the retention window (evicted even under budget)
  2. superseded episodes within the retention window (replaced: they go before any current one)
  3. stale episodic memories not cited as a source by any semantic fact
  4. stale episodic memories that are cited (the fact preserves them)
  5. aging episodic memories, lowest decay score first
  never: active semantic facts, superseded facts within retention, procedures (every version:
  they are kept for rollback), pinned memories, fresh episodes.
The retention window counts from when the memory was superseded (the later of ``t_invalid``
and the row's last update).

Storage size (``max_storage_mb``) counts the data the memories hold, not the files' size on
disk: SQLite never shrinks its file when rows go (free pages are reused) and the vector engine
preallocates segments, so a budget on file sizes could never be met by evicting. Each memory
counts its text (content, triple, name, steps, conditions, source, context) plus a fixed row
cost, and each of its vectors ``4 x dimension`` bytes plus a fixed point cost (sparse terms,
payload, graph links). The sum is additive: evicting a memory lowers it by exactly its size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from ferrex.core.clock import days_between
from ferrex.core.lifecycle.staleness import AGING, STALE
from ferrex.core.memory import Memory, MemoryType

ACCESS_SLOWDOWN = 0.5
ROW_BYTES = 512  # ids, timestamps, entity links and SQLite indexes of one memory
POINT_BYTES = 512  # sparse terms, payload and HNSW links of one vector point


def memory_size(text_bytes: int, chunks: int, dimension: int) -> int:
    """Bytes one memory counts against the storage budget (module docstring)."""
    return store_size(1, text_bytes, max(1, chunks), dimension)


def store_size(memories: int, text_bytes: int, points: int, dimension: int) -> int:
    """Bytes a whole store counts against the budget: the sum of its ``memory_size``s."""
    return text_bytes + memories * ROW_BYTES + points * (4 * dimension + POINT_BYTES)


def decay_score(memory: Memory, now: datetime, episodic_half_life_days: float) -> float:
    if memory.pinned or memory.type is not MemoryType.EPISODIC:
        return 1.0
    reference = memory.created_at
    if memory.last_validated is not None and memory.last_validated > reference:
        reference = memory.last_validated
    days = days_between(reference, now)
    half_life = episodic_half_life_days * (
        1.0 + ACCESS_SLOWDOWN * math.log1p(max(0, memory.access_count))
    )
    return 2.0 ** (-days / half_life)


@dataclass(frozen=True)
class EvictionCandidate:
    memory: Memory
    priority: int  # 1..5, the order of the module docstring
    reason: str
    decay: float


RETAINED_TYPES = (MemoryType.SEMANTIC, MemoryType.EPISODIC)


def superseded_past_retention(memory: Memory, now: datetime, retention_days: float) -> bool:
    """A superseded fact or episode whose retention window has passed (procedure versions are
    kept for rollback). The window counts from when ferrex recorded the invalidation (the later
    of ``t_invalid`` and the row's last update): a fact superseded today by one valid since last
    year stays queryable for the full window."""
    if memory.type not in RETAINED_TYPES or memory.t_invalid is None or memory.pinned:
        return False
    invalidated = max(memory.t_invalid, memory.updated_at)
    return days_between(invalidated, now) > retention_days


def eviction_candidates(
    memories: Iterable[tuple[Memory, str]],
    *,
    now: datetime,
    retention_days: float,
    cited: set[str],
    episodic_half_life_days: float,
) -> list[EvictionCandidate]:
    """Rank evictable memories in the spec's priority order (``memories`` pairs carry levels)."""
    ranked: list[EvictionCandidate] = []
    for memory, level in memories:
        if memory.pinned:
            continue
        score = decay_score(memory, now, episodic_half_life_days)
        if superseded_past_retention(memory, now, retention_days):
            ranked.append(EvictionCandidate(memory, 1, "superseded past retention window", score))
        elif memory.type is not MemoryType.EPISODIC:
            continue  # superseded facts within retention, and anything else, are kept
        elif memory.t_invalid is not None:
            ranked.append(EvictionCandidate(memory, 2, "superseded episodic", score))
        elif level == STALE:
            if memory.id in cited:
                ranked.append(
                    EvictionCandidate(memory, 4, "stale episodic (cited by a fact)", score)
                )
            else:
                ranked.append(EvictionCandidate(memory, 3, "stale episodic", score))
        elif level == AGING:
            ranked.append(EvictionCandidate(memory, 5, "aging episodic, low relevance", score))
    ranked.sort(key=lambda c: (c.priority, c.decay, c.memory.created_at, c.memory.id))
    return ranked


def choose_evictions(
    ranked: Sequence[EvictionCandidate],
    *,
    excess_memories: int,
    excess_bytes: float,
    size_of: Callable[[Memory], float],
) -> list[EvictionCandidate]:
    """Priority-1 candidates always go; then as many as needed to get back under budget
    (``size_of``: the bytes a memory counts against the budget)."""
    chosen = [c for c in ranked if c.priority == 1]
    need_memories = max(0, excess_memories - len(chosen))
    need_bytes = max(0.0, excess_bytes - sum(size_of(c.memory) for c in chosen))
    for candidate in ranked:
        if candidate.priority == 1:
            continue
        if need_memories <= 0 and need_bytes <= 0:
            break
        chosen.append(candidate)
        need_memories -= 1
        need_bytes -= size_of(candidate.memory)
    return chosen
