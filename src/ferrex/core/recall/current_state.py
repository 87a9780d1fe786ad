"""Current state: a question about how things are *now* prefers a fact the store has seen change.

"What do our CI builds run on now?", "Which Godot version is the project on these days?": the
question asks for a state, and the store knows which of its facts are states that change — the
ones that superseded an earlier value (contradiction handling set the old one's
``superseded_by``). Without a cross-encoder nothing else in the evidence reads "now": a
bi-encoder scores the event that tells of the switch ("CI builds were slow, we moved the
runners...") as close as the fact that holds the result, and the fresh event then wins.

When the question carries a present-time cue (``now``, ``these days``, ``currently``, ``at the
moment``, ``still``, ``latest``...), is not historical (no ``as_of``), and a current fact that
superseded another is at least ``LIFTS_FROM`` relevant on its own evidence, its relevance gains
``retrieval.current_state_bonus`` logits (docs/recall.md, "Current state"). Never an event, a
procedure, or a fact that never changed: the cue tells which memories answer, not which are
about the question. English cues only.
"""

from __future__ import annotations

import re

from ferrex.core.memory import Memory, MemoryType

# A candidate is lifted only when its own relevance is at least this (as for the answer type).
LIFTS_FROM = 0.5

# Present-time words that ask for the state as it is. Not "today" ("what happened today?" asks
# for events), "current" inside "current events", nor "any more" before what it counts ("are
# there any more open tickets?": a quantity; "...any more?" at the clause's end is the time).
_CUE = re.compile(
    r"\b(?:now|nowadays|these days|currently|at the moment|at present|presently|right now|"
    r"as of today|still|anymore|any more(?=\s*(?:[?.!,;]|$))|latest|current(?! events?\b))\b"
)


def asks_current(query: str, *, historical: bool) -> bool:
    """Whether a question asks for the present state (never a historical, ``as_of``, one)."""
    if historical:
        return False
    return bool(_CUE.search(query.lower().replace("\u2019", "'")))


def bonus(memory: Memory, relevance: float, changed: bool, amount: float) -> float:
    """The logits a candidate of ``relevance`` gains: ``amount`` for a current fact that
    superseded an earlier value (``changed``), when it is at least ``LIFTS_FROM`` relevant."""
    if amount <= 0 or not changed or relevance < LIFTS_FROM:
        return 0.0
    if memory.type is not MemoryType.SEMANTIC or not memory.is_current:
        return 0.0
    return amount
