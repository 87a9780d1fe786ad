"""Procedural memory (spec "Procedural Memory"): named workflows, versioned, old versions kept.

Storing a procedure whose name exists in the namespace creates version N+1 and closes the
validity of version N (so recall returns the newest by default and ``include_invalidated`` or
``version`` reach the old ones). Rolling back to version k stores a new version N+1 with the
content of version k: history stays linear and nothing is lost.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ferrex.core.index.chunking import STEP_MARKER
from ferrex.core.memory import Memory

_NAME_SEPARATORS = re.compile(r"\s+")


def normalize_name(name: str) -> str:
    """Procedure names compare case-insensitively with collapsed whitespace."""
    return _NAME_SEPARATORS.sub(" ", name.strip().lower())


def render_content(name: str | None, conditions: Sequence[str], steps: Sequence[str]) -> str:
    """Self-contained text of a procedure given as name/conditions/steps."""
    parts: list[str] = []
    if name:
        parts.append(f"Procedure: {name}")
    if conditions:
        parts.append("When: " + "; ".join(conditions))
    if steps:
        parts.append("Steps:")
        parts.extend(f"{i}. {step}" for i, step in enumerate(steps, start=1))
    return "\n".join(parts)


def next_version(versions: Sequence[Memory]) -> int:
    return max((m.version or 0 for m in versions), default=0) + 1


def current_version(versions: Sequence[Memory]) -> Memory | None:
    current = [m for m in versions if m.t_invalid is None]
    if not current:
        return None
    return max(current, key=lambda m: (m.version or 0, m.created_at))


def same_procedure_name(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and normalize_name(a) == normalize_name(b)


_HEADER = re.compile(r"^\s*(?:procedure|steps)\s*:", re.IGNORECASE)
_CONDITIONS = re.compile(r"^\s*when\s*:\s*", re.IGNORECASE)


def definition(memory: Memory) -> tuple[list[str], list[str]]:
    """What a procedure version says: its steps and its conditions, without list markers and
    spacing. Given as text, each line is a step, a "When:" line holds the conditions and the
    "Procedure:" / "Steps:" headers that ferrex itself writes are skipped, so the same
    procedure given as a list or as numbered text compares equal. Case is kept ("export PATH"
    is not "export path"); a marker is only a list marker when a space follows ("1.5 GB" keeps
    its number)."""

    def norm(text: str) -> str:
        return " ".join(STEP_MARKER.sub("", text, count=1).split())

    if memory.steps:
        return [norm(s) for s in memory.steps], [norm(c) for c in memory.conditions]
    steps: list[str] = []
    conditions = [norm(c) for c in memory.conditions]
    for line in (memory.content or "").splitlines():
        if not line.strip() or _HEADER.match(line):
            continue
        if _CONDITIONS.match(line) and not memory.conditions:
            conditions.extend(norm(c) for c in _CONDITIONS.sub("", line).split(";") if c.strip())
            continue
        steps.append(norm(line))
    return steps, conditions


def same_definition(a: Memory, b: Memory) -> bool:
    """True when two procedure versions say the same thing (a new version would change
    nothing), however they were written: steps or numbered text, another case of the name."""
    return definition(a) == definition(b)


def find_version(versions: Sequence[Memory], version: int) -> Memory | None:
    for memory in versions:
        if memory.version == version:
            return memory
    return None
