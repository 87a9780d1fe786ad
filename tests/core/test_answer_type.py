"""Answer type (core/recall/answer_type.py): a question asking where / who / when / how many
lifts the facts that hold that kind of answer; nothing else changes. Unit tests at the rules'
edges, and the rule through a real MCP client."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.support.harness import mcp_client, ok

from ferrex.core.memory import Memory, MemoryType
from ferrex.core.recall.answer_type import AnswerType, asked_for, bonus, holds

NOW = datetime(2026, 12, 6, tzinfo=UTC)


def fact(predicate: str, obj: str) -> Memory:
    return Memory(
        id="m",
        namespace="default",
        type=MemoryType.SEMANTIC,
        created_at=NOW,
        updated_at=NOW,
        event_time=NOW,
        content=f"x {predicate} {obj}",
        subject="x",
        predicate=predicate,
        object=obj,
    )


def event(content: str) -> Memory:
    return Memory(
        id="e",
        namespace="default",
        type=MemoryType.EPISODIC,
        created_at=NOW,
        updated_at=NOW,
        event_time=NOW,
        content=content,
    )


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("Where do the images live these days?", "place"),
        ("In mid-August, where was the dataset kept?", "place"),
        ("When and where is the weekly meeting?", "place"),  # the rarer answer first
        ("Who looks after the harness?", "person"),
        ("Whose laptop was stolen?", "person"),
        ("When does API v2 get switched off?", "time"),
        ("By what date is the draft due?", "time"),
        ("How many GPUs does heron have?", "quantity"),
        ("How long do we keep logs?", "quantity"),
        # No type: a "what" / "which" question, a word that only contains one, another language.
        ("What is the licence of the dataset?", None),
        ("Which framework is the model written in?", None),
        ("Is the data somewhere safe?", None),
        ("Did the whole team agree?", None),
        ("How do I rotate the key?", "procedure"),
        ("Walk me through getting a collaborator cleared", "procedure"),
        ("What are the steps to cut a release?", "procedure"),
        ("How did the rotation go?", None),  # an event's question, not a how-to
        ("Where do I find the steps to cut a release?", "procedure"),
        ("How do I rotate the keys when they expire?", "procedure"),  # not a time
        ("What should we do when the deploy fails?", "procedure"),
        ("What\u2019s the process for onboarding?", "procedure"),  # a typographic apostrophe
        ("How does one request access?", "procedure"),
        ("Remind me who owns billing", "person"),
        # A relative clause asks nothing: no type.
        ("Show me the notes where we discussed pricing", None),
        ("Tell me about the person who set up CI", None),
        ("¿Dónde están las imágenes?", None),
    ],
)
def test_the_kind_a_question_asks_for(question: str, kind: str | None) -> None:
    assert asked_for(question) == kind


@pytest.mark.parametrize(
    ("predicate", "obj", "kinds"),
    [
        ("stored_at", "the Kestrel NAS", {"place"}),
        ("license", "CC BY-NC 4.0: non-commercial use only", {"quantity"}),
        ("split", "38,200 train and 5,000 test images", {"quantity"}),
        ("backup", "/nfs/okafor/backups nightly", {"place"}),
        ("docs", "https://docs.example.org", {"place"}),
        ("owned_by", "billing squad", {"person"}),
        ("maintained by", "billing squad", {"person"}),
        ("contact", "the front desk", {"person"}),
        ("lab_manager", "Daniel Osei", {"person"}),
        ("written_in", "Go", set()),
        ("written_in", "Python", set()),
        ("deadline", "the end of the month", {"time"}),
        ("meets", "Tuesdays in room 3.14", {"time", "place", "quantity"}),
        ("sunset", "2027-03-31", {"time", "quantity"}),
        ("has_gpus", "two RTX 3090 cards with 24 GB each", {"quantity"}),
        # Near misses: a predicate that only contains a place word's letters elsewhere.
        ("begins_with", "a capital letter", set()),
        ("delivery", "by courier", set()),
        ("director", "Ama Mensah", {"person"}),
        ("created_at", "the first sprint", set()),
        ("note", "files may be deleted", set()),
        # Near misses of the review: a word that is a person's or a time's only as the last
        # word, a stem that is a place's only whole, a name that is a product's.
        ("replaced_by", "the v2 endpoint", {"person"}),
        ("lead_time", "two weeks", {"time"}),  # a duration, not a person
        ("team_lead", "the platform team", {"person"}),
        ("story_points", "eight", set()),
        ("go_live", "after the audit", set()),
        ("back_end", "Django", set()),
        ("storage", "Google Cloud Storage", {"place"}),
        ("cloud", "AWS S3", set()),
        ("city", "New York City", {"place"}),
        ("owner", "Jan Kowalski", {"person"}),
        ("renewal", "Jan 5", {"time", "quantity"}),
        ("runtime", "Python v3", set()),
    ],
)
def test_what_a_fact_holds(predicate: str, obj: str, kinds: set[str]) -> None:
    kinds_all: tuple[AnswerType, ...] = ("place", "person", "time", "quantity")
    found = {k for k in kinds_all if holds(fact(predicate, obj), k)}
    assert found == kinds


@pytest.mark.parametrize(
    ("subject", "predicate", "person"),
    [
        # What a person is answers "who ...?": the subject is the person asked for.
        ("Harriet Pryce", "role", True),
        ("Harriet Pryce", "job_title", True),
        ("Priya R. Nair", "position", True),
        # Near misses: not a person's name, or not what the person is.
        ("billing API", "role", False),
        ("AWS S3", "role", False),
        ("Harriet Pryce", "prefers", False),
        ("Harriet Pryce", "rolex_model", False),
    ],
)
def test_what_a_person_is_answers_who(subject: str, predicate: str, person: bool) -> None:
    memory = replace(
        fact(predicate, "accountant who files our quarterly VAT returns"), subject=subject
    )
    assert holds(memory, "person") is person


def test_what_gains_and_from_which_relevance() -> None:
    stored = fact("stored_at", "/data/reefcap")
    assert bonus(stored, 0.5, "place", 2.0) == 2.0  # LIFTS_FROM itself
    assert bonus(stored, 0.4999, "place", 2.0) == 0.0  # an unrelated memory stays unrelated
    assert bonus(stored, 0.9, "person", 2.0) == 0.0
    assert bonus(stored, 0.9, "procedure", 2.0) == 0.0
    assert bonus(stored, 0.9, None, 2.0) == 0.0
    assert bonus(stored, 0.9, "place", 0.0) == 0.0  # the setting at 0 turns it off
    # An event that names a place and a date holds no type: its text is not an answer's shape.
    moved = event("moved the ReefCap images to /projects/okafor/reefcap on 2026-09-08")
    assert bonus(moved, 0.9, "place", 2.0) == 0.0 and bonus(moved, 0.9, "time", 2.0) == 0.0
    assert bonus(moved, 0.9, "procedure", 2.0) == 0.0
    release = replace(moved, type=MemoryType.PROCEDURAL, content=None, name="cut-release")
    assert bonus(release, 0.6, "procedure", 2.0) == 2.0
    assert bonus(release, 0.6, "place", 2.0) == 0.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_a_where_question_gets_the_fact_that_holds_a_place(
    tmp_path: Path, models_dir: Path
) -> None:
    """Three facts about one dataset and an event that names it: "where" is answered by the fact
    holding a path (which explain marks), not by the licence, which the cosine prefers, nor by
    the event, which BM25 prefers; a "what" question about its licence is not touched by the
    rule. (Without the rule the stored_at fact's relevance here is about 0.5, under the
    others.)"""
    async with mcp_client(tmp_path / "d", models_dir) as client:

        async def store(arguments: dict[str, Any]) -> str:
            return str((await ok(client, "store", arguments))["id"])

        where = await store(
            {"subject": "ReefCap dataset", "predicate": "stored_at", "object": "/projects/reefcap"}
        )
        licence = await store(
            {
                "subject": "ReefCap dataset",
                "predicate": "license",
                "object": "CC BY-NC 4.0: research use; the photographs belong to the institute",
            }
        )
        await store(
            {
                "subject": "ReefCap dataset",
                "predicate": "split",
                "object": "train, validation and test images divided by dive site",
            }
        )
        two_months_ago = (datetime.now(UTC) - timedelta(days=60)).date().isoformat()
        await store(
            {
                "content": "Reviewed the ReefCap image captions with the marine biologists.",
                "timestamp": two_months_ago,
            }
        )
        answer = await ok(
            client,
            "recall",
            {"query": "Where do the ReefCap images live these days?", "explain": True},
        )
        first = answer["results"][0]
        assert first["id"] == where, answer["results"]
        assert first["explain"]["answer_type"] == "place"
        assert all("answer_type" not in r["explain"] for r in answer["results"][1:])
        what = await ok(
            client, "recall", {"query": "What licence does ReefCap have?", "explain": True}
        )
        assert what["results"][0]["id"] == licence
        assert all("answer_type" not in r["explain"] for r in what["results"])
