"""Realistic, varied memories for the latency benchmarks, from ``../shared/eval`` (never copied).

LoCoMo dialog turns become episodes ("Caroline: ..."); SciFact abstracts become windows of one
or two consecutive sentences (with or without the paper's title; about 91,000 of them), then
pairs of sentences from two different papers, so 100,000 memories of real text exist without
near-duplicates (dedup rejects cosine > 0.95). Every tenth memory
is a fact with a subject / predicate / object and every seventh names entities, so the store
path resolves and embeds entity names as an agent's stores do.

Queries are LoCoMo questions and SciFact claims: text the memories do not contain verbatim.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EVAL = Path(os.environ.get("FERREX_BENCH_EVAL", ROOT.parent / "shared" / "eval"))
LOCOMO = EVAL / "locomo-dev" / "locomo-dev.json"
SCIFACT = EVAL / "scifact-dev" / "corpus.jsonl"
SCIFACT_QUERIES = EVAL / "scifact-dev" / "queries.jsonl"
CORPUS_VERSION = "3"  # bump when the generator changes (cached stores are keyed by it)

_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_PREDICATES = ["uses", "depends_on", "owns", "prefers", "works_on", "located_in"]


def _locomo_turns() -> list[dict[str, Any]]:
    samples = json.loads(LOCOMO.read_text(encoding="utf-8"))
    turns: list[dict[str, Any]] = []
    for sample in samples:
        conversation = sample["conversation"]
        for key, session in conversation.items():
            if not key.startswith("session_") or not isinstance(session, list):
                continue
            for turn in session:
                text = str(turn.get("text", "")).strip()
                if text:
                    turns.append({"speaker": turn.get("speaker", "someone"), "text": text})
    return turns


def _abstracts() -> list[tuple[str, list[str]]]:
    out = []
    with SCIFACT.open(encoding="utf-8") as handle:
        for line in handle:
            doc = json.loads(line)
            sentences = [s.strip() for s in _SENTENCE.split(doc.get("text", "")) if s.strip()]
            if sentences:
                out.append((str(doc.get("title", "")).strip(), sentences))
    return out


def memories(seed: int = 7, *, fresh: bool = False) -> Iterator[dict[str, Any]]:
    """An endless, deterministic stream of store requests (callers take what they need).

    ``fresh``: only the two-paper sentence pairs (no episodes), which no stored window
    duplicates: new memories to time single stores with."""
    rng = random.Random(seed)
    turns = _locomo_turns()
    abstracts = _abstracts()
    windows = [
        (a, start, length)
        for a, (_, sentences) in enumerate(abstracts)
        for start in range(len(sentences))
        for length in (1, 2)
        if start + length <= len(sentences)
    ]
    rng.shuffle(windows)
    serial = 0
    turn_cursor = 0
    window_cursor = 0
    while True:
        serial += 1
        if serial % 12 == 0 and turn_cursor < len(turns) and not fresh:
            turn = turns[turn_cursor]
            turn_cursor += 1
            yield {"type": "episodic", "content": f"{turn['speaker']}: {turn['text']}"}
            continue
        if window_cursor < len(windows) and not fresh:
            a, start, length = windows[window_cursor]
            window_cursor += 1
            title, sentences = abstracts[a]
            text = " ".join(sentences[start : start + length])
            if rng.random() < 0.3 and title:
                text = f"{title}: {text}"
        else:  # every window used: two sentences of two different papers (still unique)
            a, b = rng.sample(range(len(abstracts)), 2)
            title = abstracts[a][0]
            text = f"{rng.choice(abstracts[a][1])} {rng.choice(abstracts[b][1])}"
        item: dict[str, Any] = {"content": text[:3000]}
        if serial % 10 == 0:
            words = [w for w in re.findall(r"[A-Za-z][A-Za-z-]{3,}", title or text)][:3]
            subject = " ".join(words) or f"study {a}"
            item = {
                "type": "semantic",
                "subject": f"{subject} {a}",
                "predicate": rng.choice(_PREDICATES),
                "object": " ".join(text.split()[:6]),
                "content": text[:3000],
            }
        elif serial % 7 == 0:
            names = [w for w in re.findall(r"\b[A-Z][a-zA-Z0-9-]{2,}\b", text)][:3]
            if names:
                item["entities"] = names
        yield item


def queries(count: int, seed: int = 11) -> list[str]:
    """Questions and claims (LoCoMo questions, SciFact claims), shuffled, ``count`` of them."""
    samples = json.loads(LOCOMO.read_text(encoding="utf-8"))
    texts = [str(qa["question"]) for sample in samples for qa in sample["qa"]]
    with SCIFACT_QUERIES.open(encoding="utf-8") as handle:
        texts += [str(json.loads(line)["text"]) for line in handle]
    rng = random.Random(seed)
    rng.shuffle(texts)
    unique = list(dict.fromkeys(texts))
    return (unique * (count // len(unique) + 1))[:count]
