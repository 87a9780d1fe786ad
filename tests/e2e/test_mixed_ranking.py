"""Ranking a real user's store: mixed types (events, facts that get updated, procedures), through
a real MCP stdio client at the shipped defaults (issue 35).

Stores written for these tests, before and apart from the ranking they check (``tests/data/``):
``mixed_small.json`` (the first two weeks of a solo developer's assistant, 20 memories) and
``mixed_team.json`` (three months of a 12-person team's assistant, 147 memories), and two
written blind by a helper who had not seen the ranking code (``mixed_studio.json``,
``mixed_home.json``). Each memory is stored through ``store`` in order, events with their
``timestamp``; the dates are moved so that the set's ``now`` is today (what an event's age means
does not drift with the calendar). The rules checked: an exact fact above a loosely matching
fresh event; the current value of an updated fact above its superseded one (never returned by
default) and above the events that mention the topic; a how-to question answered by its
procedure; a question about something the store never heard of answered with nothing; every
score relevance in [0, 1], never rising down a page.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.support.harness import mcp_client, ok
from tests.support.paths import DATA

from ferrex.config.recall import RetrievalConfig

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / name).read_text(encoding="utf-8"))
    return data


def moved(arguments: dict[str, Any], shift: timedelta) -> dict[str, Any]:
    """The store arguments with their dates moved by ``shift`` (the set's now -> today)."""
    out = dict(arguments)
    for key in ("timestamp", "t_valid"):
        if key in out:
            out[key] = (date.fromisoformat(out[key]) + shift).isoformat()
    return out


def defaults_env() -> dict[str, str]:
    defaults = RetrievalConfig()
    return {
        "FERREX_RETRIEVAL__MIN_SCORE": str(defaults.min_score),
        "FERREX_RETRIEVAL__ANSWER_GATE__RELEVANCE": str(defaults.answer_gate.relevance),
        "FERREX_RETRIEVAL__ANSWER_GATE__COSINE": str(defaults.answer_gate.cosine),
    }


async def store_set(client: Any, data: dict[str, Any]) -> dict[str, str]:
    """Store every memory in order; key -> id. Every memory is accepted (none a duplicate)."""
    shift = datetime.now(UTC).date() - date.fromisoformat(data["now"])
    ids: dict[str, str] = {}
    for memory in data["memories"]:
        answer = await ok(client, "store", moved(memory["store"], shift))
        assert answer["status"] in ("stored", "superseded"), (memory["key"], answer)
        ids[memory["key"]] = answer["id"]
    return ids


async def ask(client: Any, question: str, limit: int = 5) -> dict[str, Any]:
    return await ok(client, "recall", {"query": question, "limit": limit, "explain": True})


def ranked(answer: dict[str, Any], key_of: dict[str, str]) -> list[str]:
    return [key_of.get(r["id"], r["id"]) for r in answer["results"]]


def honest_scores(answer: dict[str, Any]) -> None:
    """Scores in [0, 1], never rising down the page, never above the base score (the
    relevance, or the cross-encoder's probability) that ``explain`` shows."""
    scores = [r["score"] for r in answer["results"]]
    assert all(0.0 <= s <= 1.0 for s in scores), scores
    assert scores == sorted(scores, reverse=True), scores
    for result in answer["results"]:
        assert result["score"] <= result["explain"]["base_score"] + 1e-4, result


async def firsts(client: Any, data: dict[str, Any], key_of: dict[str, str]) -> dict[str, int]:
    """Ask every answerable question (``as_of`` moved with the set's dates); how many of each
    kind came back with the answer first. Scores honest on every page; a current question's
    superseded fact never returned."""
    shift = datetime.now(UTC).date() - date.fromisoformat(data["now"])
    first: dict[str, list[bool]] = {}
    for question in data["questions"]:
        if question["answer"] is None:
            continue
        arguments: dict[str, Any] = {"query": question["q"], "limit": 5, "explain": True}
        if question.get("as_of"):
            arguments["as_of"] = (date.fromisoformat(question["as_of"]) + shift).isoformat()
        got = await ok(client, "recall", arguments)
        honest_scores(got)
        order = ranked(got, key_of)
        first.setdefault(question["kind"], []).append(order[:1] == [question["answer"]])
        if question["kind"] == "current":
            assert question["superseded"] not in order, (question["q"], order)
    return {kind: sum(values) for kind, values in first.items()}


async def test_a_small_mixed_store_answers_with_its_fact_its_current_value_and_its_procedure(
    tmp_path: Path, models_dir: Path
) -> None:
    """The first two weeks of a user (20 memories). The exact facts rank above the fresh
    release events that share their words; both updated facts answer with the current value
    (the old one is not returned); the release how-to gets its procedure; a question about
    something never stored gets nothing. (Measured and not asserted, docs/recall.md: "who
    should I talk to about the login service?" puts the auth outage event, which says "login",
    above "auth service owned by team Falcon"; the near-miss questions with no answer — a phone
    number, a watchOS version, a push service's owner — still come back with results.)"""
    data = load("mixed_small.json")
    questions = {q["q"]: q for q in data["questions"]}
    async with mcp_client(tmp_path / "d", models_dir, **defaults_env()) as client:
        ids = await store_set(client, data)
        key_of = {v: k for k, v in ids.items()}
        for question, answer in (
            ("What's the oldest iOS version our app still supports?", "f_ios_min"),
            ("Which team is responsible for the billing API?", "f_billing_owner"),
            ("What Android SDK level does the app target?", "f_android_target"),
            (
                "How many requests per minute can a single user send to the forecast API now?",
                "f_rate_limit_v2",
            ),
            ("Which Fly.io region is the backend running in?", "f_api_region_v2"),
            ("What are the steps to push a new app version out to the stores?", "p_cut_release"),
        ):
            assert questions[question]["answer"] == answer
            got = await ask(client, question)
            honest_scores(got)
            order = ranked(got, key_of)
            assert order[:1] == [answer], (question, order)
            superseded = questions[question].get("superseded")
            assert superseded is None or superseded not in order, (question, order)
        rotate = await ask(
            client, "The SwellData key needs replacing again, how do I do that safely?"
        )
        assert "p_rotate_api_key" in ranked(rotate, key_of)[:2], ranked(rotate, key_of)
        nothing = await ask(client, "What's a good recipe for sourdough bread?")
        assert nothing["results"] == [] and nothing["no_results"].startswith("nothing relevant")


async def test_a_team_store_of_three_months_ranks_the_answer_first(
    tmp_path: Path, models_dir: Path
) -> None:
    """147 memories (75 events, 57 facts of which 9 updated, 15 procedures) and 37 questions
    with one right memory each. Measured at the shipped defaults (bench/assistant.py on this
    file): the answer first for 37 of 37, every updated fact's current value first for 9 of 9
    and its old value never returned, the procedure first for 8 of 8 how-to questions, the fact
    first for 10 of 10. Asserted with a margin of one or two for model and platform noise;
    before the ranking of issue 35 (score = relevance x boost / 1.3) it was 19 of 37, 0 of 9
    and 5 of 8; before the answer-type rule (core/recall/answer_type.py) 33, 7 and 7."""
    data = load("mixed_team.json")
    async with mcp_client(tmp_path / "d", models_dir, **defaults_env()) as client:
        ids = await store_set(client, data)
        hits = await firsts(client, data, {v: k for k, v in ids.items()})
        assert sum(hits.values()) >= 35, hits
        assert hits["current"] >= 8 and hits["howto"] >= 7 and hits["fact"] >= 9, hits


@pytest.mark.parametrize(
    ("name", "answered", "current"),
    [("mixed_studio.json", 22, 5), ("mixed_home.json", 25, 6)],
)
async def test_a_store_written_blind_answers_now_questions_with_the_current_value(
    tmp_path: Path, models_dir: Path, name: str, answered: int, current: int
) -> None:
    """Two stores written by someone who had not seen the ranking code: ``mixed_studio.json``
    (a game studio's assistant: 90 memories, 6 updated facts, 32 answerable questions) and
    ``mixed_home.json`` (a freelance translator's household and business: 110 memories, 8
    updated facts, 37 answerable questions, written after the rules below). Measured at the
    shipped defaults (bench/assistant.py on each file): the answer first for 24 of 32 and 27 of
    37, the current value first for 6 of 6 and 7 of 8 "current" questions, the old value never
    returned. Before the current-state rule (core/recall/current_state.py) mixed_studio was 21
    and 3 of 6 (the event telling of the change, or the upgrade procedure, came first).
    Asserted with a margin of one or two for model and platform noise."""
    data = load(name)
    async with mcp_client(tmp_path / "d", models_dir, **defaults_env()) as client:
        ids = await store_set(client, data)
        hits = await firsts(client, data, {v: k for k, v in ids.items()})
        assert sum(hits.values()) >= answered, hits
        assert hits["current"] >= current, hits


async def test_the_margin_rule_holds_with_a_cross_encoder(tmp_path: Path, models_dir: Path) -> None:
    """With the tiny test cross-encoder (logit 4 x "zebra" count - 2): a fresh event and a fact
    it scores the same are ordered by recency (the event, fresher, first); a fact it scores
    clearly higher (two "zebra": logit 6 against 2) stays above the fresh event; an event from
    a year ago, stored today, is a year old for the boost, and the fact of the same score
    passes it."""
    from tests.support.tiny_cross_encoder import build_tiny_cross_encoder

    model = build_tiny_cross_encoder(tmp_path / "tiny")
    today = datetime.now(UTC)
    async with mcp_client(
        tmp_path / "d", models_dir, "--reranker-path", str(model), **defaults_env()
    ) as client:

        async def store(arguments: dict[str, Any]) -> str:
            answer = await ok(client, "store", arguments)
            return str(answer["id"])

        fresh = await store(
            {
                "content": "the zebra enclosure reopened after the fence repair",
                "timestamp": today.isoformat(),
            }
        )
        old = await store(
            {
                "content": "the zebra count at the reserve was done by drone survey",
                "timestamp": (today - timedelta(days=365)).isoformat(),
            }
        )
        fact = await store(
            {"subject": "reserve map", "predicate": "marks", "object": "zebra grazing zones"}
        )
        both = await store(
            {"subject": "zebra herd", "predicate": "tracked by", "object": "zebra collars"}
        )
        answer = await ok(client, "recall", {"query": "zebra", "limit": 4, "explain": True})
        assert answer["explain"]["reranked"] is True
        honest_scores(answer)
        order = [r["id"] for r in answer["results"]]
        assert order == [both, fresh, fact, old], answer["results"]
        scores = {r["id"]: r for r in answer["results"]}
        assert scores[both]["explain"]["rerank_score"] == pytest.approx(6.0)
        assert scores[fresh]["explain"]["rerank_score"] == pytest.approx(2.0)
        assert scores[old]["timestamp"].startswith((today - timedelta(days=365)).date().isoformat())
