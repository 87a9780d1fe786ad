"""Answer type: what kind of thing a question asks for, and the facts that hold one.

A question that asks *where*, *who*, *when* or *how many / how much / how long* names the kind of
answer it wants; a fact's predicate and object say which kinds it holds (``stored_at`` and a
path: a place; ``owned_by`` or a person's name: a person; a deadline or a date: a time; a
number: a quantity). Without a cross-encoder, which reads the question and the memory together,
nothing else in the relevance evidence knows this: a bi-encoder scores "about the same thing",
so "Where do the ReefCap images live these days?" found the dataset's *licence* and *splits*
above its storage location, and "How many render jobs can one pod run?" found a load-test event
above the concurrency fact.

Where the question's type is one a fact holds, that fact's relevance gains
``retrieval.answer_type_bonus`` logits (docs/recall.md, "Answer type"). Facts only: their
predicate and object are the answer's shape; an event's or a procedure's text is not typed.
English question words only; a question of another language, or a "what" / "which" question,
has no type and changes nothing.
"""

from __future__ import annotations

import re
from typing import Literal

from ferrex.core.memory import Memory, MemoryType

AnswerType = Literal["place", "person", "time", "quantity"]

# The question's type: the first of these its words match (in this order: "where" before
# "when" in "when and where": a place is the rarer answer). Lowercased text.
_ASKS: tuple[tuple[AnswerType, re.Pattern[str]], ...] = (
    ("place", re.compile(r"\bwhere\b")),
    ("person", re.compile(r"\b(?:who|whom|whose)\b")),
    ("time", re.compile(r"\b(?:when|what date|which date|what day|which day|what time)\b")),
    ("quantity", re.compile(r"\bhow (?:many|much|long|big|large|old|fast|often)\b")),
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
    """Whether a fact's predicate or object is an answer of ``kind`` (never for an event or a
    procedure)."""
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


def bonus(memory: Memory, kind: AnswerType | None, amount: float) -> float:
    """The logits a candidate's relevance gains: ``amount`` for a fact holding the asked type."""
    if kind is None or amount <= 0:
        return 0.0
    return amount if holds(memory, kind) else 0.0
