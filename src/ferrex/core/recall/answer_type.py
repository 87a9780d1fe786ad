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

# Where a question word opens what is asked: the question's start, a clause's (after a comma,
# "and", "but"...), or after "me" / "know" / "remember"... ("remind me who owns billing"); not a
# relative clause ("the notes where...", "the person who set it up", "rotate keys when they
# expire").
_OPENS = (
    r"(?:^|[,;:(]\s*|\b(?:and|or|but|so|then|me|us|know|wonder|wondering|remember|recall"
    r"|forgot|sure|tell)\s+)"
)

# The question's type: the first of these its words match. A how-to question first ("how do I
# rotate the keys when they expire?" asks for the procedure, not a time); then "where" before
# "when" in "when and where" (a place is the rarer answer). Lowercased text, ’ as '.
_ASKS: tuple[tuple[AnswerType, re.Pattern[str]], ...] = (
    (
        "procedure",
        re.compile(
            r"\bhow (?:do|does|can|should|would|could|will) (?:i|we|you|one|they|someone)\b|"
            r"\bhow to\b|\bwalk me through\b|\bsteps? (?:to|for)\b|"
            r"\bwhat(?:'s| is| are) the (?:process|procedure|steps)\b|\bchecklist\b|"
            r"\bwhat (?:do|should|must) (?:i|we) do\b|\bwhat has to happen\b"
        ),
    ),
    ("place", re.compile(_OPENS + r"where\b")),
    ("person", re.compile(_OPENS + r"(?:who|whom|whose)\b")),
    (
        "time",
        re.compile(_OPENS + r"when\b|\b(?:what|which) (?:date|day|time)\b|\bby what date\b"),
    ),
    ("quantity", re.compile(r"\bhow (?:many|much|long|big|large|old|fast|often)\b")),
)

_MONTH = r"january|february|march|april|june|july|august|september|october|november|december"
# An abbreviated month counts beside a day number ("Jan 5", "5 Sep"), never alone: "Jan
# Kowalski" is a person.
_MONTH_SHORT = r"jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec"
_WEEKDAY = r"monday|tuesday|wednesday|thursday|friday|saturday|sunday"


def _words(text: str) -> list[str]:
    return text.split()


# What a fact holds: its predicate's words (lowercased, split at "_", "-" and spaces) or its
# object. Whole words, the stems listed, or the last word: "written_in" is not a place,
# "story_points" not "stored", "replaced_by" a person but not "lead_time", "back_end" no time.
_PLACE_WORDS = frozenset(
    _words(
        "store stored stores storage lives kept path dir directory folder room site address "
        "region bucket url where office building server zone city country"
    )
)
_PLACE_STEMS = ("locat", "host", "mount")
_PERSON_WORDS = frozenset(
    _words(
        "owner owners manager maintainer maintainers contact head chair admin administrator "
        "director supervisor advisor adviser assignee reviewer author pi responsible oncall"
    )
)
_PERSON_STEMS = ("maintain",)
_PERSON_LAST = frozenset(_words("by lead"))  # owned_by, team_lead
_TIME_WORDS = frozenset(
    _words(
        "date dates deadline when day time schedule scheduled expires expiry ends starts "
        "until due since sunset eol"
    )
)
_TIME_STEMS = ("expir", "schedul")
_PLACE_OBJECT = re.compile(r"(?:^|\s)~?/\w|\w+://|\broom\s+\w*\d", re.IGNORECASE)
# A name and nothing else ("Daniel Osei", "Priya R. Nair"; not "AWS S3" nor "Google Cloud
# Storage"), or a team.
_NAME = r"[A-Z][a-z]+(?:[-'][A-Za-z]+)?"
_PERSON_NAME = rf"^{_NAME}(?:\s+[A-Z]\.)?\s+{_NAME}$"
_PERSON_OBJECT = re.compile(rf"{_PERSON_NAME}|\b[Tt]eam\b")
# A fact about a person that says what they are ("Harriet Pryce role accountant who files our
# VAT returns") answers "who does our taxes?": its subject is the person asked for.
_PERSON_SUBJECT = re.compile(_PERSON_NAME)
_ROLE_WORDS = frozenset(_words("role job title position occupation profession"))
_TIME_OBJECT = re.compile(
    rf"\d{{4}}-\d\d-\d\d|\b(?:{_MONTH})\b|\b(?:{_WEEKDAY})s?\b"
    rf"|\b(?:{_MONTH_SHORT})\.?\s+\d|\b\d{{1,2}}\s+(?:{_MONTH_SHORT})\b"
    r"|\b\d{1,2}(?::\d\d)?\s?(?:am|pm)\b",
    re.IGNORECASE,
)
# A number, not a digit inside a name ("v2", "S3").
_NUMBER = re.compile(r"(?<![A-Za-z.])\d")
_SEPARATORS = re.compile(r"[\s_\-]+")


def asked_for(query: str) -> AnswerType | None:
    """The kind of answer a question asks for (None: none of the five, or not English)."""
    text = query.lower().replace("\u2019", "'")
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
        return (
            _names(words, _PERSON_WORDS, _PERSON_STEMS)
            or words[-1] in _PERSON_LAST
            or bool(_PERSON_OBJECT.search(value))
            or (_names(words, _ROLE_WORDS, ()) and _is_person(memory.subject))
        )
    if kind == "time":
        return _names(words, _TIME_WORDS, _TIME_STEMS) or bool(_TIME_OBJECT.search(value))
    return bool(_NUMBER.search(value))


def _is_person(subject: str | None) -> bool:
    return bool(subject and _PERSON_SUBJECT.search(subject.strip()))


def _names(words: list[str], whole: frozenset[str], stems: tuple[str, ...]) -> bool:
    return any(w in whole or w.startswith(stems) for w in words)


def bonus(memory: Memory, relevance: float, kind: AnswerType | None, amount: float) -> float:
    """The logits a candidate of ``relevance`` gains: ``amount`` for a memory holding the asked
    type, when it is at least ``LIFTS_FROM`` relevant on its own evidence."""
    if kind is None or amount <= 0 or relevance < LIFTS_FROM:
        return 0.0
    return amount if holds(memory, kind) else 0.0
