"""Distinguishing tokens: what identifies a thing in a text, for every matching rule.

The design's similarity thresholds (dedup cosine > 0.95, Jaro-Winkler > 0.85, name embedding
> 0.92) are right for rewordings and wrong for texts that differ in the one token that matters:
"deployed build 1.4.2 to staging" / "deployed build 1.4.3 to staging" have a cosine of 0.98,
"auth service 2" / "auth service 3" a Jaro-Winkler of 0.98. Two texts whose distinguishing
tokens differ are never duplicates, never the same entity, never the same predicate and never
the same value, whatever their similarity. Episodic dedup (``core/ingest/dedup.py``), the object
stage of conflict detection (``core/ingest/conflict.py``), entity resolution and predicate matching
(``core/matching/names.py``) all ask :func:`differ`.

A distinguishing token is one of:

- a number with its unit ("42 minutes" = "42 min", "120 ms", "3.5 GB", "80%"), a version
  ("1.4.2" = "v1.4.2"), or the number of an id ("#4812" = "4812", "INV-2041" = "inv 2041",
  "JIRA-881", "python3"); thousands separators and leading zeros do not count
  ("1,000" = "1000"), and small number words are numbers ("two" = "2");
- a hash or a UUID (hex of 7 characters or more with a digit and a letter: "3f9a2c1");
- a date or a time ("2024-03-05", "14:30" = "2:30 pm", "5pm", a month or weekday name,
  "today" / "yesterday" / "tomorrow");
- the polarity of an outcome (passed / failed, succeeded / failed, enabled / disabled,
  approved / rejected, up / down after a service word is not guessed) and a negation ("not",
  "never", "n't", and the contrasts "instead of", "rather than", "no longer", "as opposed to",
  "in place of": each says that something is not so).

Beyond the tokens, *where* a contrast attaches (:func:`swapped`): "comments in the PR, not in
Slack" and "comments in Slack, not in the PR" hold the same words and tokens, but a word moved
across the contrast (not, instead of, rather than, over, versus, no longer, from X to Y, X -> Y):
they say opposite things and are never duplicates.

Everything else (case, punctuation, articles, "on" / "at", synonyms) is left to the
similarity measures, so a true rewording still matches.
"""

from __future__ import annotations

import re
from functools import lru_cache

_NUMBER_WORDS = {
    "zero": "0",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
    "eleven": "11",
    "twelve": "12",
    "twenty": "20",
    "thirty": "30",
    "hundred": "100",
}

_UNITS: dict[str, tuple[str, ...]] = {
    "ns": ("ns", "nanosecond", "nanoseconds"),
    "us": ("us", "µs", "microsecond", "microseconds"),
    "ms": ("ms", "msec", "msecs", "millisecond", "milliseconds"),
    "s": ("s", "sec", "secs", "second", "seconds"),
    "min": ("m", "min", "mins", "minute", "minutes"),
    "h": ("h", "hr", "hrs", "hour", "hours"),
    "d": ("d", "day", "days"),
    "w": ("w", "wk", "wks", "week", "weeks"),
    "mo": ("mo", "mos", "month", "months"),
    "y": ("y", "yr", "yrs", "year", "years"),
    "%": ("%", "percent", "pct"),
    "b": ("b", "byte", "bytes"),
    "kb": ("k", "kb", "kib", "kilobyte", "kilobytes"),
    "mb": ("mb", "mib", "megabyte", "megabytes"),
    "gb": ("g", "gb", "gib", "gigabyte", "gigabytes"),
    "tb": ("tb", "tib", "terabyte", "terabytes"),
    "x": ("x",),
    "rps": ("rps", "qps"),
    "c": ("°c", "c", "celsius"),
    "f": ("°f", "fahrenheit"),
    "usd": ("$", "usd", "dollar", "dollars"),
    "eur": ("€", "eur", "euro", "euros"),
}
_UNIT_OF = {spelling: unit for unit, spellings in _UNITS.items() for spelling in spellings}

_MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_MONTH_OF = {name: i + 1 for i, name in enumerate(_MONTHS)}
_MONTH_OF.update({name[:3]: i + 1 for i, name in enumerate(_MONTHS) if name != "may"})
_MONTH_OF["sept"] = 9
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_RELATIVE_DAYS = ("today", "yesterday", "tomorrow", "tonight")

# Outcome polarity: each spelling names one side of one pair.
_POLARITY: dict[str, tuple[str, ...]] = {
    "outcome:pass": (
        "pass",
        "passed",
        "passes",
        "passing",
        "succeed",
        "succeeded",
        "succeeds",
        "success",
        "successful",
        "successfully",
    ),
    "outcome:fail": (
        "fail",
        "failed",
        "fails",
        "failing",
        "failure",
        "failures",
        "unsuccessful",
    ),
    "state:enabled": ("enable", "enabled", "enables"),
    "state:disabled": ("disable", "disabled", "disables"),
    "review:approved": ("approve", "approved", "approves", "accepted"),
    "review:rejected": ("reject", "rejected", "rejects", "declined"),
    "not": ("not", "never", "cannot"),
}
_POLARITY_OF = {spelling: token for token, spellings in _POLARITY.items() for spelling in spellings}

# Contrasts that negate one side: a distinguishing "not" wherever they stand.
_CONTRAST_NOT = re.compile(r"\b(?:instead of|rather than|no longer|as opposed to|in place of)\b")
# Where a text splits into the side it keeps and the side it contrasts with (:func:`swapped`).
_CONTRAST = re.compile(
    r"\b(?:instead of|rather than|as opposed to|in place of|no longer|and not|but not|not|"
    r"never|over|versus|vs)\b|n['’]t\b|→|->|=>"
)
_FROM_TO = re.compile(r"\bfrom\b(?P<old>.+?)\bto\b(?P<new>.+)")
# Words too common to say which side of a contrast a text puts a thing on.
_FILLER = frozenset(
    [
        "a",
        "an",
        "the",
        "in",
        "on",
        "at",
        "of",
        "to",
        "for",
        "with",
        "and",
        "or",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "it",
        "its",
        "this",
        "that",
        "our",
        "we",
        "i",
        "you",
        "they",
        "he",
        "she",
        "my",
        "your",
        "their",
        "by",
        "as",
        "from",
    ]
)
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_HEX = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,64}\b")
_ISO_DATE = re.compile(r"\b(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?:t(?=\d))?")
_CLOCK = re.compile(r"\b(\d{1,2}):(\d{2})(?::(\d{2}))?(?:\s*([ap])\.?m\b\.?)?")
_HOUR_AMPM = re.compile(r"\b(\d{1,2})\s*([ap])\.?m\b\.?")
# "may" is the month only next to a number ("May 5", "5th May", "May 2024").
_DATED_MAY = re.compile(r"\d\s*(?:st|nd|rd|th)?\s+may\b|\bmay\s+\d")
_WORD = re.compile(r"[^\W\d_]+")
_NEGATION = re.compile(r"n't\b|n’t\b")
_UNIT_PATTERN = "|".join(
    sorted((re.escape(s) for s in _UNIT_OF if not s[0].isalpha()), key=len, reverse=True)
)
_ALPHA_UNITS = "|".join(sorted((s for s in _UNIT_OF if s[0].isalpha()), key=len, reverse=True))
# A number: digits with dots (a version or a decimal) or thousands commas, an optional leading
# "v" (a version) or currency sign, and a unit right after it (with or without a space).
_QUANTITY = re.compile(
    r"(?<![\d.])(?P<pre>[$€])?v?(?P<num>\d+(?:,\d{3})+(?![\d])|\d+(?:\.\d+)*)"
    rf"(?:\s?(?P<unit>{_UNIT_PATTERN})|\s?(?P<word>{_ALPHA_UNITS})\b)?",
)


def _number(text: str) -> str:
    """ "1,000" -> "1000"; "007" -> "7"; "1.4.2" stays; "2.50" -> "2.5" (a decimal)."""
    if "," in text:
        text = text.replace(",", "")
    parts = text.split(".")
    if len(parts) == 2:
        whole = parts[0].lstrip("0") or "0"
        fraction = parts[1].rstrip("0")
        return f"{whole}.{fraction}" if fraction else whole
    return ".".join(part.lstrip("0") or "0" for part in parts)


def _clock(hour: int, minute: int, half: str | None) -> str:
    if half == "p" and hour < 12:
        hour += 12
    elif half == "a" and hour == 12:
        hour = 0
    return f"time:{hour:02d}:{minute:02d}"


@lru_cache(maxsize=8192)
def tokens(text: str) -> frozenset[str]:
    """The distinguishing tokens of ``text`` (module docstring), normalized so that the
    spellings of one value compare equal."""
    lowered = text.lower()
    found: set[str] = set()

    def take(pattern: re.Pattern[str], make: object) -> None:
        nonlocal lowered

        def replace(match: re.Match[str]) -> str:
            token = make(match)  # type: ignore[operator]
            if token:
                found.add(token)
            return " "

        lowered = pattern.sub(replace, lowered)

    take(_UUID, lambda m: "hash:" + m.group(0))
    take(_ISO_DATE, lambda m: f"date:{int(m[1]):04d}-{int(m[2]):02d}-{int(m[3]):02d}")
    take(_CLOCK, lambda m: _clock(int(m[1]), int(m[2]), m[4]))
    take(_HOUR_AMPM, lambda m: _clock(int(m[1]), 0, m[2]))
    take(_HEX, lambda m: "hash:" + m.group(0))
    if "n't" in lowered or "n’t" in lowered:
        found.add("not")
        lowered = _NEGATION.sub(" ", lowered)
    if _CONTRAST_NOT.search(lowered):
        found.add("not")
    words = _WORD.findall(lowered)
    for word in words:
        if word in _NUMBER_WORDS:
            lowered = re.sub(rf"\b{word}\b", _NUMBER_WORDS[word], lowered)
        polarity = _POLARITY_OF.get(word)
        if polarity is not None:
            found.add(polarity)
        elif word in _WEEKDAYS or word in _RELATIVE_DAYS:
            found.add(f"day:{word}")
        elif word in _MONTH_OF and (word != "may" or _DATED_MAY.search(lowered)):
            found.add(f"month:{_MONTH_OF[word]}")
    take(_QUANTITY, _quantity)
    return frozenset(found)


def _quantity(match: re.Match[str]) -> str:
    unit = match.group("unit") or match.group("word") or match.group("pre")
    number = _number(match.group("num"))
    return f"n:{number}{_UNIT_OF.get(unit, '') if unit else ''}"


def differ(a: str, b: str) -> bool:
    """True when ``a`` and ``b`` carry different distinguishing tokens, or the same words on
    opposite sides of a contrast (:func:`swapped`): they name different things (events,
    values, entities, relations) however similar they read."""
    return tokens(a) != tokens(b) or swapped(a, b)


@lru_cache(maxsize=8192)
def sides(text: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """The content words before and after a text's first contrast ("from X to Y": X and Y);
    None without one."""
    lowered = text.lower()
    moved = _FROM_TO.search(lowered)
    if moved is not None:
        return _words(lowered[: moved.start()] + moved["old"]), _words(moved["new"])
    found = _CONTRAST.search(lowered)
    if found is None:
        return None
    return _words(lowered[: found.start()]), _words(lowered[found.end() :])


def _words(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(text) if w not in _FILLER)


def swapped(a: str, b: str) -> bool:
    """True when a word stands on one side of a contrast in ``a`` and on the other in ``b``
    (and not on both sides of either): "X, not Y" against "Y, not X", "from X to Y" against
    "from Y to X". A rewording that keeps each word on its side is not swapped."""
    first, second = sides(a), sides(b)
    if first is None or second is None:
        return False
    (kept_a, other_a), (kept_b, other_b) = first, second
    forward = (kept_a - other_a) & (other_b - kept_b)
    backward = (other_a - kept_a) & (kept_b - other_b)
    return bool(forward or backward)
