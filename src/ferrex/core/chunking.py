"""Chunking strategy (spec "Chunking Strategy"): memories are not documents.

- Episodic: never chunked; longer than the model's context -> rejected.
- Semantic: a triple is always one vector.
- Procedural: one vector when it fits; otherwise one vector per step (same memory_id,
  ``step_index`` = chunk number). Steps are the natural split points, never token windows.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ferrex.core.errors import EPISODIC_TOO_LONG, FerrexError
from ferrex.core.memory import MemoryType

EPISODIC_TOO_LONG_MESSAGE = "Episodic memory too long. Break into separate events."
_STEP_MARKER = re.compile(r"^\s*(?:\d+[.)]|[-*•]|step\s+\d+[:.)]?)\s+", re.IGNORECASE)


@dataclass(frozen=True)
class Chunk:
    index: int
    text: str


def split_steps(content: str) -> list[str]:
    """Split procedure text on step boundaries (numbered/bulleted lines, else non-empty lines)."""
    lines = [line.rstrip() for line in content.splitlines()]
    steps: list[str] = []
    current: list[str] = []
    marked = any(_STEP_MARKER.match(line) for line in lines)
    for line in lines:
        if not line.strip():
            continue
        if marked:
            if _STEP_MARKER.match(line):
                if current:
                    steps.append(" ".join(current))
                current = [line.strip()]
            else:
                current.append(line.strip())
        else:
            steps.append(line.strip())
    if current:
        steps.append(" ".join(current))
    return steps


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
    pieces = list(steps) if steps else split_steps(text)
    if len(pieces) <= 1:
        # One enormous step: nothing to split on; embed it whole (the model truncates).
        return [Chunk(0, text)]
    return [Chunk(i, f"{step_prefix}{piece}") for i, piece in enumerate(pieces)]
