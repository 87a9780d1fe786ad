"""A clock the test moves by hand."""

from __future__ import annotations

from datetime import datetime, timedelta


class MovableClock:
    """A fixed clock the test moves forward (no real time passes)."""

    def __init__(self, start: datetime) -> None:
        self.current = start

    def __call__(self) -> datetime:
        return self.current

    def advance(self, days: float) -> None:
        self.current += timedelta(days=days)
