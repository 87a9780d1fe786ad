"""Named period (core/recall/period.py): a question that names when ("in early July", "in
October 2023", "last week") lifts the events that happened then; nothing else changes. Unit
tests at the rule's edges, and the rule through a real MCP client."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tests.support.harness import mcp_client, ok

from ferrex.core.memory import Memory, MemoryType
from ferrex.core.recall.formulas import logit, sigmoid
from ferrex.core.recall.period import LIFTS_FROM, TOLD_AFTER, Period, bonus, named_period

NOW = datetime(2026, 12, 6, 15, 30, tzinfo=UTC)  # a Sunday


def day(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("question", "start", "end"),
    [
        # A month after a preposition or a part of the month; its latest occurrence not after
        # today; its window runs a week past its end (what happened is told a few days later).
        ("What went wrong with the run in early July?", "2026-07-01", "2026-08-08"),
        ("In mid-August, what broke?", "2026-08-01", "2026-09-08"),
        ("Why did heron keep switching off at the end of September?", "2026-09-01", "2026-10-08"),
        ("What did we decide in December?", "2026-12-01", "2027-01-08"),
        # "since" a month: from it up to today, not that month alone.
        ("What has changed since March?", "2026-03-01", "2026-12-07"),
        ("What broke since July 2025?", "2025-07-01", "2026-12-07"),
        ("What did we plan for the 4th of July?", "2026-07-01", "2026-08-08"),
        ("What came up in the month of May?", "2026-05-01", "2026-06-08"),
        ("What happened on 5 May 2023?", "2023-05-01", "2023-06-08"),
        ("What broke in late May?", "2026-05-01", "2026-06-08"),
        # The year after the day, or after a comma (a US date).
        ("What happened on September 5th, 2023?", "2023-09-01", "2023-10-08"),
        ("What happened on Sept 5 2023?", "2023-09-01", "2023-10-08"),
        ("What broke on Oct. 3, 2024?", "2024-10-01", "2024-11-08"),
        ("What setback came in October, 2023?", "2023-10-01", "2023-11-08"),
        ("What setback did Melanie face in October 2023?", "2023-10-01", "2023-11-08"),
        ("What happened on Sept 5?", "2026-09-01", "2026-10-08"),
        ("What happened on 5 September?", "2026-09-01", "2026-10-08"),
        ("What did we decide in May?", "2026-05-01", "2026-06-08"),
        ("What shipped in Feb. 2025?", "2025-02-01", "2025-03-08"),
        # Relative periods, up to today.
        ("What did the plumber say yesterday?", "2026-12-05", "2026-12-07"),
        ("What did we decide this week?", "2026-11-30", "2026-12-07"),
        ("What went wrong last week?", "2026-11-23", "2026-12-07"),
        ("What did I spend this month?", "2026-12-01", "2026-12-07"),
        ("What happened last month?", "2026-11-01", "2026-12-07"),
    ],
)
def test_the_period_a_question_names(question: str, start: str, end: str) -> None:
    assert named_period(question, NOW) == Period(day(start), day(end))


@pytest.mark.parametrize(
    "question",
    [
        "May I ask what we decided about the logo?",  # "may" is a verb
        "Will the protesters march on Friday?",  # and "march"
        "What did Jan Kowalski decide?",  # "Jan" a name
        "What happened in 2023?",  # a year alone is not read
        "What did we do last weekend?",  # not "last week"
        "Which octopus species did the survey count?",  # "oct" inside a word
        "What is the deadline?",
        "Which 2 may fail first?",  # a count and the verb "may"
        "Which of the 3 may be affected?",
        "Who was in charge of March Madness?",  # "of" not after a day or a part of the year
        "How late may we check in at the cabin?",  # "may" asks permission
        "How early may I arrive?",
        # A year no date can hold: no period (never an error).
        "What did we do in May 0000?",
        "What happens in December 9999?",
        "What shipped in Feb. 0000?",
    ],
)
def test_a_question_that_names_no_period(question: str) -> None:
    assert named_period(question, NOW) is None


def test_a_month_not_yet_come_this_year_is_last_years() -> None:
    early = datetime(2026, 3, 1, tzinfo=UTC)
    assert named_period("what happened in July?", early) == Period(
        day("2025-07-01"), day("2025-07-31") + timedelta(days=1) + TOLD_AFTER
    )


def event(when: str) -> Memory:
    at = day(when)
    return Memory(
        id="e",
        namespace="default",
        type=MemoryType.EPISODIC,
        created_at=NOW,
        updated_at=NOW,
        event_time=at,
        content="The billing deploy needed a hotfix.",
    )


def test_what_gains_and_from_which_relevance() -> None:
    july = named_period("How did the billing deploy go in July?", NOW)
    assert july is not None
    assert bonus(event("2026-07-15"), LIFTS_FROM, july, 2.0) == 2.0  # LIFTS_FROM itself
    assert bonus(event("2026-07-15"), LIFTS_FROM - 1e-4, july, 2.0) == 0.0
    assert bonus(event("2026-08-07"), 0.9, july, 2.0) == 2.0  # told within the week after
    assert bonus(event("2026-08-08"), 0.9, july, 2.0) == 0.0  # past it
    assert bonus(event("2026-06-30"), 0.9, july, 2.0) == 0.0  # before it
    assert bonus(event("2025-07-15"), 0.9, july, 2.0) == 0.0  # another year's July
    assert bonus(event("2026-07-15"), 0.9, None, 2.0) == 0.0
    assert bonus(event("2026-07-15"), 0.9, july, 0.0) == 0.0  # the setting at 0 turns it off
    # A fact's time is its validity (``as_of`` asks about it): never lifted by a period.
    fact = replace(
        event("2026-07-15"),
        type=MemoryType.SEMANTIC,
        subject="billing",
        predicate="deployed_by",
        object="Rosa",
    )
    assert bonus(fact, 0.9, july, 2.0) == 0.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_a_question_naming_a_month_gets_that_months_event(
    tmp_path: Path, models_dir: Path
) -> None:
    """Two deploys of the billing service, one about five months ago and one last month, told in
    almost the same words. Asked about the older one's month by name, the older one comes first,
    explain marks it, and its relevance is the one it has without the rule (setting at 0)
    lifted by 2 logits; the newer one is untouched. A ``time_range`` already says when: nothing
    is lifted."""
    today = datetime.now(UTC)
    older = today - timedelta(days=150)
    month = older.strftime("%B %Y")
    question = f"How did the billing deploy go in {month}?"
    async with mcp_client(tmp_path / "d", models_dir) as client:

        async def store(text: str, when: datetime) -> str:
            answer = await ok(client, "store", {"content": text, "timestamp": when.isoformat()})
            return str(answer["id"])

        first = await store(
            "Billing deploy to production: the rollout needed a hotfix for the receipt page.",
            older,
        )
        second = await store(
            "How the billing deploy went: the billing deploy to production needed a hotfix for "
            "the invoice page.",
            today - timedelta(days=30),
        )
        await store("Lunch with the design team at the new ramen place.", older)
        answer = await ok(client, "recall", {"query": question, "explain": True})
        lifted = {r["id"]: r["explain"] for r in answer["results"]}
        assert [r["id"] for r in answer["results"]][:2] == [first, second], answer["results"]
        assert lifted[first]["named_period"] is True
        assert "named_period" not in lifted[second]
        ranged = await ok(
            client,
            "recall",
            {
                "query": question,
                "explain": True,
                "time_range": {"after": (older - timedelta(days=400)).date().isoformat()},
            },
        )
        assert ranged["results"], ranged
        assert all("named_period" not in r["explain"] for r in ranged["results"])
        # A year no date holds names no period: an answer, never an internal error.
        odd = await ok(client, "recall", {"query": "How did the billing deploy go in May 0000?"})
        assert odd["results"], odd

    async with mcp_client(
        tmp_path / "d", models_dir, FERREX_RETRIEVAL__NAMED_PERIOD_BONUS="0"
    ) as client:
        answer = await ok(client, "recall", {"query": question, "explain": True})
        plain = {r["id"]: r["explain"] for r in answer["results"]}
        assert all("named_period" not in e for e in plain.values()), answer["results"]
        assert lifted[first]["relevance"] == pytest.approx(
            sigmoid(logit(plain[first]["relevance"]) + 2.0), abs=1e-5
        )
        assert lifted[second]["relevance"] == pytest.approx(plain[second]["relevance"], abs=1e-6)
