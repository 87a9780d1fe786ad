"""Answer type: what kind of thing a question asks for, and the memories that hold one.

A question that asks *where*, *who*, *when*, *how many / how much / how long* or *how do I*
names the kind of answer it wants; a fact's predicate and object say which kinds it holds
(``stored_at`` and a path: a place; ``owned_by`` or a person's name: a person; a deadline or a
date: a time; a number: a quantity), and a procedure is the answer to a how-to question.
Without a cross-encoder, which reads the question and the memory together, nothing else in the
relevance evidence knows this: a bi-encoder scores "about the same thing", so "Where do the
ReefCap images live these days?" found the dataset's *licence* and *splits* above its storage
location, "How many render jobs can one pod run?" a load-test event above the concurrency fact,
and "Walk me through getting a collaborator cleared to read the data" the access *fact* above
the procedure.

Where the question's type is one a memory holds, and the memory is at least ``LIFTS_FROM``
relevant on its own evidence, its relevance gains ``retrieval.answer_type_bonus`` logits
(docs/recall.md, "Answer type"). Never an event: its text is not an answer's shape.
English question words only; a question of another language, or a "what" / "which" question
that is none of these, has no type and changes nothing.
"""

from __future__ import annotations

import re
from typing import Literal

from ferrex.core.memory import Memory, MemoryType

AnswerType = Literal["place", "person", "time", "quantity", "procedure"]

# A candidate is lifted only when its own relevance is at least this: the question's type
# tells apart the candidates that are about the question; it does not make an unrelated one
# relevant.
LIFTS_FROM = 0.5

# The question's type: the first of these its words match (in this order: "where" before
# "when" in "when and where": a place is the rarer answer). Lowercased text.
_ASKS: tuple[tuple[AnswerType, re.Pattern[str]], ...] = (
    ("place", re.compile(r"\bwhere\b")),
    ("person", re.compile(r"\b(?:who|whom|whose)\b")),
    ("time", re.compile(r"\b(?:when|what date|which date|what day|which day|what time)\b")),
    ("quantity", re.compile(r"\bhow (?:many|much|long|big|large|old|fast|often)\b")),
    (
        "procedure",
        re.compile(
            r"\bhow (?:do|can|should|would|could) (?:i|we|you|one)\b|\bhow to\b|"
            r"\bwalk me through\b|\bsteps? (?:to|for)\b|"
            r"\bwhat(?:'s| is| are) the (?:process|procedure|steps)\b|\bchecklist\b|"
            r"\bwhat (?:do|should|must) (?:i|we) do\b|\bwhat has to happen\b"
        ),
    ),
)

_MONTH = (
    r"january|february|march|april|june|july|august|september|october|november|december|"
    r"jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
_WEEKDAY = r"monday|tuesday|wednesday|thursday|friday|saturday|sunday"


def _words(text: str) -> list[str]:
    return text.split()


# What a fact holds: its predicate's words (lowercased, split at "_", "-" and spaces) or its
# object. Whole words, or the stems listed: "written_in" is not a place, "delivery" not "live".
_PLACE_WORDS = frozenset(
    _words(
        "live lives kept path dir directory folder room site address region bucket url "
        "where office building repo repository server zone city country"
    )
)
_PLACE_STEMS = ("stor", "locat", "host", "mount")
_PERSON_WORDS = frozenset(
    _words(
        "by owner owners manager lead maintainer maintainers contact head chair admin "
        "administrator director supervisor advisor adviser assignee reviewer author pi "
        "responsible oncall"
    )
)
_PERSON_STEMS = ("maintain",)
_TIME_WORDS = frozenset(
    _words(
        "date dates deadline when day time schedule scheduled expires expiry end ends "
        "start starts until due since sunset eol"
    )
)
_TIME_STEMS = ("expir", "schedul")
_PLACE_OBJECT = re.compile(r"(?:^|\s)~?/\w|\w+://|\broom\s+\w*\d", re.IGNORECASE)
# A name and nothing else ("Daniel Osei", "Priya R. Nair"), or a team.
_PERSON_OBJECT = re.compile(r"^(?:[A-Z][\w'.-]*\s+){1,3}[A-Z][\w'.-]*$|\b[Tt]eam\b")
_TIME_OBJECT = re.compile(
    rf"\d{{4}}-\d\d-\d\d|\b(?:{_MONTH})\b|\b(?:{_WEEKDAY})s?\b|\b\d{{1,2}}(?::\d\d)?\s?(?:am|pm)\b",
    re.IGNORECASE,
)
_DIGIT = re.compile(r"\d")
_SEPARATORS = re.compile(r"[\s_\-]+")


def asked_for(query: str) -> AnswerType | None:
    """The kind of answer a question asks for (None: not one of the four, or not English)."""
    text = query.lower()
    for kind, pattern in _ASKS:
        if pattern.search(text):
            return kind
    return None


def holds(memory: Memory, kind: AnswerType) -> bool:
    """Whether a memory is an answer of ``kind``: a procedure for a how-to question, a fact
    whose predicate or object is one for the others (never an event)."""
    if kind == "procedure":
        return memory.type is MemoryType.PROCEDURAL
    if memory.type is not MemoryType.SEMANTIC or not memory.predicate:
        return False
    words = _SEPARATORS.split(memory.predicate.lower())
    value = (memory.object or "").strip()
    if kind == "place":
        return _names(words, _PLACE_WORDS, _PLACE_STEMS) or bool(_PLACE_OBJECT.search(value))
    if kind == "person":
        return _names(words, _PERSON_WORDS, _PERSON_STEMS) or bool(_PERSON_OBJECT.search(value))
    if kind == "time":
        return _names(words, _TIME_WORDS, _TIME_STEMS) or bool(_TIME_OBJECT.search(value))
    return bool(_DIGIT.search(value))


def _names(words: list[str], whole: frozenset[str], stems: tuple[str, ...]) -> bool:
    return any(w in whole or w.startswith(stems) for w in words)


def bonus(memory: Memory, relevance: float, kind: AnswerType | None, amount: float) -> float:
    """The logits a candidate of ``relevance`` gains: ``amount`` for a memory holding the asked
    type, when it is at least ``LIFTS_FROM`` relevant on its own evidence."""
    if kind is None or amount <= 0 or relevance < LIFTS_FROM:
        return 0.0
    return amount if holds(memory, kind) else 0.0
