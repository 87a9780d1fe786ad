"""Chunking strategy (spec "Chunking Strategy"): memories are not documents.

- Episodic: never chunked; longer than the model's context -> rejected.
- Semantic: a triple is always one vector.
- Procedural: one vector when it fits; otherwise one vector per step (same memory_id,
  ``step_index`` = chunk number = step number - 1). Steps are the natural split points, never
  token windows. Each step vector is prefixed with the procedure's name and conditions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ferrex.core.errors import EPISODIC_TOO_LONG, FerrexError
from ferrex.core.memory import Memory, MemoryType

EPISODIC_TOO_LONG_MESSAGE = "Episodic memory too long. Break into separate events."
STEP_MARKER = re.compile(r"^\s*(?:\d+[.)]|[-*•]|step\s+\d+[:.)]?)\s+", re.IGNORECASE)


@dataclass(frozen=True)
class Chunk:
    index: int
    text: str


def split_procedure(content: str) -> tuple[str, list[str]]:
    """Split procedure text into (preamble, steps) on step boundaries.

    With numbered/bulleted lines, each marked line starts a step (unmarked lines continue it) and
    the lines before the first step are the preamble (title, conditions); otherwise every
    non-empty line is a step and there is no preamble.
    """
    lines = [line.strip() for line in content.splitlines() if line.strip()]
    if not any(STEP_MARKER.match(line) for line in lines):
        return "", lines
    preamble: list[str] = []
    steps: list[str] = []
    current: list[str] = []
    for line in lines:
        if STEP_MARKER.match(line):
            if current:
                steps.append(" ".join(current))
            current = [line]
        elif current:
            current.append(line)
        else:
            preamble.append(line)
    if current:
        steps.append(" ".join(current))
    return " ".join(preamble), steps


def split_steps(content: str) -> list[str]:
    """The steps of procedure text (see ``split_procedure``)."""
    return split_procedure(content)[1]


def step_prefix(memory: Memory) -> str:
    """What each step vector of a split procedure starts with: the procedure's name and when it
    applies, so every step stays findable by the procedure it belongs to and its conditions."""
    if memory.type is not MemoryType.PROCEDURAL:
        return ""
    head = memory.name or ""
    if memory.conditions:
        when = "when " + "; ".join(memory.conditions)
        head = f"{head} ({when})" if head else when
    return f"{head}: " if head else ""


def plan_chunks(
    memory_type: MemoryType,
    text: str,
    *,
    steps: Sequence[str],
    count_tokens: Callable[[str], int],
    max_tokens: int,
    step_prefix: str = "",
) -> list[Chunk]:
    """The texts to embed for one memory (chunk 0 first)."""
    if memory_type is MemoryType.SEMANTIC:
        return [Chunk(0, text)]
    tokens = count_tokens(text)
    if memory_type is MemoryType.EPISODIC:
        if tokens > max_tokens:
            raise FerrexError(
                EPISODIC_TOO_LONG,
                EPISODIC_TOO_LONG_MESSAGE,
                tokens=tokens,
                max_tokens=max_tokens,
            )
        return [Chunk(0, text)]
    if tokens <= max_tokens:
        return [Chunk(0, text)]
    prefix = step_prefix
    if steps:
        pieces = list(steps)
    else:
        preamble, pieces = split_procedure(text)
        if preamble:
            prefix = f"{prefix}{preamble} "
    if len(pieces) <= 1:
        # One enormous step: nothing to split on; embed it whole (the model truncates).
        return [Chunk(0, text)]
    # Chunk i is step i (step_index), whatever preamble the content had.
    return [Chunk(i, f"{prefix}{piece}") for i, piece in enumerate(pieces)]
