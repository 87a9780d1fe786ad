"""Current state (core/recall/current_state.py): a question about how things are *now* lifts the
current facts that superseded an earlier value; nothing else changes. Unit tests at the rule's
edges, and the rule through a real MCP client."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.support.harness import mcp_client, ok

from ferrex.core.memory import Memory, MemoryType
from ferrex.core.recall.current_state import LIFTS_FROM, asks_current, bonus

NOW = datetime(2026, 12, 6, tzinfo=UTC)


@pytest.mark.parametrize(
    ("question", "current"),
    [
        ("What do our CI builds run on now?", True),
        ("Which Godot version is the project on these days?", True),
        ("Who currently owns billing?", True),
        ("What's the price at the moment?", True),
        ("Is the VPN still on WireGuard?", True),
        ("Which runner do we use right now?", True),
        ("What's the latest minimum iOS version?", True),
        ("What is the current on-call rotation?", True),
        ("Who doesn’t work on the app anymore?", True),  # ’ and "anymore"
        ("Do we use Jenkins any more?", True),
        ("Are there any more open tickets?", False),  # a quantity, not the time
        ("Did the plumber leave any more notes", False),
        # No cue: a word that only contains one, "today" (events), "current events".
        ("What do our CI builds run on?", False),
        ("Who knows the nowcast model?", False),  # "now" inside a word
        ("What happened today in the standup?", False),
        ("Summarise the current events of the week", False),
        ("What was stilled?", False),
    ],
)
def test_a_question_about_the_present(question: str, current: bool) -> None:
    assert asks_current(question, historical=False) is current


def test_a_historical_question_is_never_about_the_present() -> None:
    """With ``as_of`` the question asks for the past, whatever its words say."""
    assert asks_current("What do our CI builds run on now?", historical=True) is False


def fact(*, current: bool = True) -> Memory:
    return Memory(
        id="f",
        namespace="default",
        type=MemoryType.SEMANTIC,
        created_at=NOW,
        updated_at=NOW,
        event_time=NOW,
        content="CI builds run_on a self-hosted runner",
        subject="CI builds",
        predicate="run_on",
        object="a self-hosted runner",
        t_invalid=None if current else NOW,
    )


def test_what_gains_and_from_which_relevance() -> None:
    changed = fact()
    assert bonus(changed, LIFTS_FROM, True, 3.0) == 3.0  # LIFTS_FROM itself
    assert bonus(changed, LIFTS_FROM - 1e-4, True, 3.0) == 0.0  # unrelated stays unrelated
    assert bonus(changed, 0.9, False, 3.0) == 0.0  # a fact that never changed
    assert bonus(changed, 0.9, True, 0.0) == 0.0  # the setting at 0 turns it off
    # An old value is never lifted (it is not returned by default either).
    assert bonus(fact(current=False), 0.9, True, 3.0) == 0.0
    # Events and procedures are not states, even where a memory id says they "changed".
    switch = replace(changed, type=MemoryType.EPISODIC, subject=None, predicate=None, object=None)
    assert bonus(switch, 0.9, True, 3.0) == 0.0
    steps = replace(switch, type=MemoryType.PROCEDURAL, name="move-ci-runners")
    assert bonus(steps, 0.9, True, 3.0) == 0.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_a_now_question_gets_the_value_that_replaced_an_earlier_one(
    tmp_path: Path, models_dir: Path
) -> None:
    """The CI runner changed: the old fact, the event that tells of the switch, the new fact.
    "... now?" is answered by the new value, which explain marks as lifted, and the old value is
    not returned; without the cue, with ``as_of``, or with the setting at 0, nothing is lifted;
    a fact that never changed is never lifted."""
    async with mcp_client(tmp_path / "d", models_dir) as client:

        async def store(arguments: dict[str, Any]) -> dict[str, Any]:
            return dict(await ok(client, "store", arguments))

        today = datetime.now(UTC).date()
        old = await store(
            {
                "subject": "CI builds",
                "predicate": "run_on",
                "object": "GitHub-hosted Ubuntu runners",
                "t_valid": (today - timedelta(days=80)).isoformat(),
            }
        )
        await store(
            {
                "subject": "CI builds",
                "predicate": "cache",
                "object": "the Godot import cache, keyed on the lock file",
            }
        )
        await store(
            {
                "content": "CI builds took 40 minutes on the GitHub-hosted runners, so Tobias "
                "moved the CI builds to a self-hosted runner in the office.",
                "timestamp": (today - timedelta(days=10)).isoformat(),
            }
        )
        new = await store(
            {
                "subject": "CI builds",
                "predicate": "run_on",
                "object": "a self-hosted runner on the office build machine",
                "t_valid": (today - timedelta(days=10)).isoformat(),
            }
        )
        assert new["status"] == "superseded" and old["id"] in str(new), new

        async def ask(query: str, **extra: Any) -> list[dict[str, Any]]:
            answer = await ok(client, "recall", {"query": query, "explain": True, **extra})
            return list(answer["results"])

        now = await ask("What do our CI builds run on now?")
        assert now[0]["id"] == new["id"], now
        assert now[0]["explain"]["current_state"] is True
        assert all("current_state" not in r["explain"] for r in now[1:]), now
        assert old["id"] not in [r["id"] for r in now]
        plain = await ask("What do our CI builds run on?")
        assert all("current_state" not in r["explain"] for r in plain), plain
        past = await ask(
            "What do our CI builds run on now?",
            as_of=(today - timedelta(days=40)).isoformat(),
        )
        assert past and all("current_state" not in r["explain"] for r in past), past

    async with mcp_client(
        tmp_path / "d", models_dir, FERREX_RETRIEVAL__CURRENT_STATE_BONUS="0"
    ) as client:
        answer = await ok(
            client, "recall", {"query": "What do our CI builds run on now?", "explain": True}
        )
        assert answer["results"], answer
        assert all("current_state" not in r["explain"] for r in answer["results"])
