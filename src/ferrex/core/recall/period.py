"""Named period: the stretch of time a question names, and the events that happened in it.

"What went wrong with Maya's four-GPU run in early July?", "What setback did Melanie face in
October 2023?", "What did we decide last week?": the question names *when*, and an event carries
when it happened (its ``timestamp``) as metadata, which neither the dense nor the BM25 channel
reads — BM25 even matches the month's *word* in an unrelated event's text ("due 7 September").

The period is read from the question: a month named after "in", "during", "early", "mid",
"late", "the start / beginning / end of", "the 4th / month / middle of", or beside a year or a
day ("July 2023", "September 5", "5 September"); or "yesterday", "this / last week", "this /
last month". A month without a year is its latest occurrence not after today. An event whose
time falls in the period — a named month's days plus the week after it, since what happened is
often told a few days later; "since" a month, from it up to today — and that is at least
``LIFTS_FROM`` relevant gains ``retrieval.named_period_bonus`` logits (docs/recall.md, "Named
period"). Never a fact or a procedure (their time is validity, which ``as_of`` asks about), and
never when the request already says when (``as_of``, ``time_range``). English only.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from ferrex.core.memory import Memory, MemoryType

# A candidate is lifted only when its own relevance is at least this (as for the answer type).
LIFTS_FROM = 0.5

# What happened is often told a few days after: a named month's window runs this far past it.
TOLD_AFTER = timedelta(days=7)

# The years a question's number may name (datetime's range, less the month and week past one).
_FIRST_YEAR, _LAST_YEAR = 1, 9998

_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
# A month counts where it names a time: after a preposition or a part of the month, or before a
# year or a day number ("may" alone is a verb, "march" one too, "Jan" a name).
# "of" only after a day or a part of the year ("the 4th of July", "the month of May"; not "in
# charge of March Madness"); a day before the month not after a determiner ("which 2 may fail?",
# "the 3 may be affected": a count and a verb). "since" runs from the month up to today.
# "how early / late may we...?" asks permission: "may" before its subject is the verb there.
_NOT_ASKING = r"(?!(?:(?<=early )|(?<=late ))may\s+(?:i|we|you|they|he|she|it)\b)"
_YEAR = r"(?:\.?,?\s+(?P<{}>\d{{4}})\b)?"  # "May 2023", "May, 2023"
_NAMED = re.compile(
    rf"\bsince\s+(?P<s>{_MONTH})\b{_YEAR.format('ys')}"
    rf"|\b(?:in|during|early|mid|late|throughout|around|start of|beginning of|end of"
    rf"|(?:\d{{1,2}}(?:st|nd|rd|th)|month|middle) of)\s+{_NOT_ASKING}"
    rf"(?P<a>{_MONTH})\b{_YEAR.format('ya')}"
    rf"|\b(?P<b>{_MONTH})\.?\s+(?:(?P<yb>\d{{4}})\b|\d{{1,2}}(?:st|nd|rd|th)?\b{_YEAR.format('yd')})"
    rf"|(?<!\bthe )(?<!\bwhich )(?<!\bthese )(?<!\bthose )(?<!\ball )(?<!\btop )"
    rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?P<c>{_MONTH})\b{_YEAR.format('yc')}"
)
_RELATIVE = re.compile(r"\b(yesterday|(?:this|last|past) (?:week|month))\b")


@dataclass(frozen=True)
class Period:
    """A half-open stretch of time ``[start, end)``."""

    start: datetime
    end: datetime

    def holds(self, moment: datetime) -> bool:
        return self.start <= moment < self.end


def named_period(query: str, now: datetime) -> Period | None:
    """The period a question names (the first one), or None."""
    text = query.lower().replace("\u2019", "'").replace("-", " ")
    named = _NAMED.search(text)
    if named is not None:
        month = _MONTHS[next(named.group(g) for g in "sabc" if named.group(g))]
        years = (named.group(g) for g in ("ys", "ya", "yb", "yc", "yd"))
        year_text = next((y for y in years if y), "")
        year = int(year_text) if year_text else (now.year if month <= now.month else now.year - 1)
        if not _FIRST_YEAR <= year <= _LAST_YEAR:
            return None  # "in May 0000": no date to compare with
        start = now.replace(year=year, month=month, day=1, hour=0, minute=0, second=0)
        start = start.replace(microsecond=0)
        if named.group("s"):  # since then, up to today
            tomorrow = now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
            return Period(start, max(tomorrow, start))
        days = calendar.monthrange(year, month)[1]
        return Period(start, start + timedelta(days=days) + TOLD_AFTER)
    relative = _RELATIVE.search(text)
    if relative is None:
        return None
    return _relative(relative.group(1), now)


def _relative(phrase: str, now: datetime) -> Period:
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    tomorrow = day + timedelta(days=1)
    if phrase == "yesterday":
        return Period(day - timedelta(days=1), tomorrow)
    if phrase == "this week":
        return Period(day - timedelta(days=day.weekday()), tomorrow)
    if phrase in ("last week", "past week"):
        return Period(day - timedelta(days=day.weekday() + 7), tomorrow)
    this_month = day.replace(day=1)
    if phrase == "this month":
        return Period(this_month, tomorrow)
    last_month = (this_month - timedelta(days=1)).replace(day=1)
    return Period(last_month, tomorrow)  # last / past month, told up to today


def bonus(memory: Memory, relevance: float, period: Period | None, amount: float) -> float:
    """The logits a candidate of ``relevance`` gains: ``amount`` for an event that happened in
    the ``period`` the question names, when it is at least ``LIFTS_FROM`` relevant."""
    if period is None or amount <= 0 or relevance < LIFTS_FROM:
        return 0.0
    if memory.type is not MemoryType.EPISODIC or not period.holds(memory.event_time):
        return 0.0
    return amount
