"""A reversed statement is a different memory (issue 37, part 3), through a real MCP client.

"Alice prefers code review comments in Slack, not in the PR" and "... in the PR, not in Slack"
have a cosine of 0.998: the second was refused as a duplicate of the first, and the agent's
correction was lost. Two texts whose words swap around a contrast (not, instead of, rather
than, over, versus, no longer, from X to Y, X -> Y) are never duplicates
(``core/matching/distinguishing.py`` ``swapped``); a rewording that keeps every word on its side
(case, punctuation, a hyphen) is still caught. Every pair below was written for this test; each
reversed pair has a cosine above the 0.95 duplicate threshold with the bundled MiniLM
(0.982-0.998; "no longer" 0.898), so without the rule all but one would be refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.support.harness import call, mcp_client, ok

from ferrex.core.matching.distinguishing import differ, swapped

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


REVERSED = [
    (
        "Alice prefers code review comments in Slack, not in the PR",
        "Alice prefers code review comments in the PR, not in Slack",
    ),
    (
        "we moved the CI from Jenkins to GitHub Actions",
        "we moved the CI from GitHub Actions to Jenkins",
    ),
    (
        "Bob prefers tabs over spaces in the Go services",
        "Bob prefers spaces over tabs in the Go services",
    ),
    (
        "use Postgres instead of MySQL for the billing service",
        "use MySQL instead of Postgres for the billing service",
    ),
    (
        "the team chose Kafka rather than RabbitMQ for the event bus",
        "the team chose RabbitMQ rather than Kafka for the event bus",
    ),
    (
        "Priya wants the standup on Zoom, not on Google Meet",
        "Priya wants the standup on Google Meet, not on Zoom",
    ),
    (
        "the API returns errors as JSON instead of plain text",
        "the API returns errors as plain text instead of JSON",
    ),
    (
        "the mobile team switched from Redux to Zustand",
        "the mobile team switched from Zustand to Redux",
    ),
    (
        "staging pulls images from GHCR, not from Docker Hub",
        "staging pulls images from Docker Hub, not from GHCR",
    ),
    (
        "Carlos prefers squash merges over rebase merges",
        "Carlos prefers rebase merges over squash merges",
    ),
    (
        "the nightly job writes to S3 rather than to the local disk",
        "the nightly job writes to the local disk rather than to S3",
    ),
    (
        "the frontend uses pnpm instead of npm",
        "the frontend uses npm instead of pnpm",
    ),
    (
        "logs go to Loki, not to Elasticsearch",
        "logs go to Elasticsearch, not to Loki",
    ),
    (
        "the search service migrated from Solr to OpenSearch",
        "the search service migrated from OpenSearch to Solr",
    ),
    (
        "Dana likes dark mode over light mode in the admin console",
        "Dana likes light mode over dark mode in the admin console",
    ),
    (
        "the cron runs in UTC rather than in local time",
        "the cron runs in local time rather than in UTC",
    ),
    (
        "we pay the invoice by card, not by bank transfer",
        "we pay the invoice by bank transfer, not by card",
    ),
    (
        "the auth tokens are stored in cookies instead of local storage",
        "the auth tokens are stored in local storage instead of cookies",
    ),
    (
        "the default branch was renamed from master to main",
        "the default branch was renamed from main to master",
    ),
    (
        "release notes are written in Notion, not in Confluence",
        "release notes are written in Confluence, not in Notion",
    ),
    (
        "Eve prefers email over Slack for urgent pages",
        "Eve prefers Slack over email for urgent pages",
    ),
    (
        "the test suite runs on arm runners rather than x86 runners",
        "the test suite runs on x86 runners rather than arm runners",
    ),
    (
        "the widget shows wind speed in knots, not in km/h",
        "the widget shows wind speed in km/h, not in knots",
    ),
    (
        "traffic was shifted us-east → eu-west during the drill",
        "traffic was shifted eu-west → us-east during the drill",
    ),
    (
        "the team no longer deploys on Fridays",
        "the team deploys on Fridays",
    ),
]

REWORDED = [
    (
        "Alice prefers code review comments in the PR, not in Slack",
        "Alice prefers code-review comments in the PR, not in Slack.",
    ),
    (
        "we moved the CI from Jenkins to GitHub Actions",
        "We moved the CI from Jenkins to GitHub Actions.",
    ),
    (
        "use Postgres instead of MySQL for the billing service",
        "Use Postgres instead of MySQL for the billing service!",
    ),
    (
        "Bob prefers tabs over spaces in the Go services",
        "bob prefers tabs over spaces in the go services",
    ),
    (
        "logs go to Loki, not to Elasticsearch",
        "Logs go to Loki, not to ElasticSearch.",
    ),
    (
        "the frontend uses pnpm instead of npm",
        "The frontend uses pnpm instead of npm.",
    ),
]


def test_the_rule_tells_a_swap_from_a_rewording() -> None:
    assert len(REVERSED) >= 20
    for first, second in REVERSED:
        assert differ(first, second) and differ(second, first), (first, second)
    for first, second in REWORDED:
        assert not differ(first, second), (first, second)
    # No contrast in one of the texts: no swap (their tokens may still differ).
    assert not swapped("Bob prefers tabs", "Bob prefers spaces over tabs")
    # A word that only changes side as filler ("the", "in") is no swap.
    assert not swapped(
        "logs go to Loki, not to the old cluster", "logs go to Loki, not the old cluster"
    )
    # "instead of", "rather than" and ", not" say the same: a rewording across them matches.
    assert not differ("use pnpm instead of npm", "use pnpm rather than npm")
    assert not differ("use pnpm instead of npm", "use pnpm, not npm")


async def test_a_reversed_statement_is_stored_and_a_rewording_is_still_refused(
    tmp_path: Path, models_dir: Path
) -> None:
    async with mcp_client(tmp_path / "d", models_dir) as client:
        for n, (first, second) in enumerate(REVERSED):
            namespace = f"reversed{n}"
            a = await ok(client, "store", {"content": first, "namespace": namespace})
            b = await call(client, "store", {"content": second, "namespace": namespace})
            assert b.get("status") == "stored" and b["id"] != a["id"], (second, b)
        for n, (first, second) in enumerate(REWORDED):
            namespace = f"reworded{n}"
            a = await ok(client, "store", {"content": first, "namespace": namespace})
            b = await call(client, "store", {"content": second, "namespace": namespace})
            assert b["error"]["code"] == "duplicate", (second, b)
            assert b["error"]["existing_id"] == a["id"]
        # A fact corrected by its reverse supersedes it (a new value, not the same one).
        fact: dict[str, Any] = {"subject": "Alice", "predicate": "prefers", "namespace": "fact"}
        old = await ok(
            client, "store", {**fact, "object": "review comments in Slack, not in the PR"}
        )
        new = await ok(
            client, "store", {**fact, "object": "review comments in the PR, not in Slack"}
        )
        assert new["status"] == "superseded" and new["superseded"] == [old["id"]], new
