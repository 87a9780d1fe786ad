"""Time: one UTC clock, one timestamp format, day arithmetic."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

Clock = Callable[[], datetime]

_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
# An ISO-8601 date or date-time by its form alone (whether the day exists or not).
_ISO_SHAPE = re.compile(
    r"^\d{4}-\d{2}-\d{2}(?:[Tt ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?(?:[Zz]|[+-]\d{2}:?\d{2})?$"
)
SECONDS_PER_DAY = 86_400.0


def utcnow() -> datetime:
    return datetime.now(UTC)


def to_iso(moment: datetime) -> str:
    """Fixed-width RFC 3339 in UTC (lexicographic order == time order)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime(_FORMAT)


def from_iso(text: str) -> datetime:
    """Parse a timestamp written by :func:`to_iso` (or any ISO-8601 string)."""
    return parse_timestamp(text)


def parse_timestamp(text: str) -> datetime:
    """Parse an agent-supplied ISO-8601 timestamp or date; naive values are taken as UTC.

    Raises ``ValueError`` with a readable message for anything else.
    """
    raw = text.strip()
    if not raw:
        raise ValueError("empty timestamp")
    if len(raw) > 64:
        raise ValueError("timestamp too long")
    try:
        if len(raw) == 10:
            parsed_date = date.fromisoformat(raw)
            moment = datetime(parsed_date.year, parsed_date.month, parsed_date.day, tzinfo=UTC)
        else:
            moment = datetime.fromisoformat(raw.replace("z", "Z"))
    except ValueError as exc:
        if _ISO_SHAPE.match(raw):  # the form is right, the calendar or the clock is not
            raise ValueError(
                f"'{raw[:40]}' is an ISO-8601 timestamp of a moment that does not exist "
                f"({exc}): check the day, month and time"
            ) from exc
        raise ValueError(
            f"'{raw[:40]}' is not an ISO-8601 timestamp (e.g. 2026-04-03T10:30:00Z)"
        ) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    if not 1970 <= moment.year <= 9998:
        raise ValueError("timestamp year must be between 1970 and 9998")
    return moment


def days_between(earlier: datetime, later: datetime) -> float:
    """Fractional days from ``earlier`` to ``later`` (never negative)."""
    return max(0.0, (later - earlier).total_seconds() / SECONDS_PER_DAY)


def days_ago(now: datetime, days: float) -> datetime:
    return now - timedelta(days=days)
