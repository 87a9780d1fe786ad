"""Dates as BM25 terms: an episode's month and year, matched only by a query that names them.

An episodic memory's BM25 document carries its event month and year as two reserved terms
("datemay date2023"), and a query that names a month or a year gets the same terms added to
its BM25 text. "What did we ship in March?" then matches March's events lexically, even when
the agent does not turn the phrase into a ``time_range``. The terms are reserved words, not the
plain month name, so the verb "may", a day number or "python 3.9" never match a date. Only the
sparse channel sees them: content, dense vectors and token budgets are unchanged.
"""

from __future__ import annotations

import re
from datetime import datetime

MONTHS = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)  # fmt: skip
_ABBREVIATIONS = {m[:3]: m for m in MONTHS} | {"sept": "september"}
# Words that make an ambiguous month name ("may", "mar", "jun"...) a date: "in May", "May 2023".
_DATE_CONTEXT = {
    "in", "during", "since", "until", "till", "of", "early", "mid", "late", "last", "next",
    "before", "after", "from", "by", "on", "around", "through",
}  # fmt: skip
_TOKEN = re.compile(r"[a-z]+|\d+")
PREFIX = "date"


def document_terms(when: datetime) -> str:
    """The reserved terms of an event time: "datemay date2023 datemay2023" (the month of that
    year too, so "March 2024" prefers March 2024 over March 2023 and over other 2024 events)."""
    month = MONTHS[when.month - 1]
    return f"{PREFIX}{month} {PREFIX}{when.year} {PREFIX}{month}{when.year}"


def query_terms(query: str) -> str:
    """The reserved terms for the months and years a query names ("" when it names none)."""
    tokens = _TOKEN.findall(query.lower())
    months: list[str] = []
    years: list[str] = []
    for i, token in enumerate(tokens):
        if token.isdigit():
            if len(token) == 4 and 1900 <= int(token) <= 2099:
                years.append(token)
            continue
        month = _month(tokens, i)
        if month is not None:
            months.append(month)
    found = [f"{PREFIX}{m}" for m in months] + [f"{PREFIX}{y}" for y in years]
    found += [f"{PREFIX}{m}{y}" for m in months for y in years]
    return " ".join(dict.fromkeys(found))


def _month(tokens: list[str], i: int) -> str | None:
    token = tokens[i]
    if token in MONTHS and token != "may":
        return token
    month = "may" if token == "may" else _ABBREVIATIONS.get(token)
    if month is None:
        return None
    before = tokens[i - 1] if i > 0 else ""
    after = tokens[i + 1] if i + 1 < len(tokens) else ""
    if before in _DATE_CONTEXT or before.isdigit() or after.isdigit():
        return month
    return None
