"""Identifiers: memory ids are short, time-ordered and unique; point ids derive from them."""

from __future__ import annotations

import re
import secrets
import uuid
from datetime import datetime
from functools import lru_cache

MEMORY_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_:.-]{0,79}$")
_POINT_NAMESPACE = uuid.UUID("6f1c2d1e-6a53-4b8e-9b54-3f1f0f6f2a11")


def new_memory_id(now: datetime) -> str:
    """``mem_`` + 48-bit millisecond timestamp + 48 random bits, all hex (28 characters).

    Time-ordered; 48 random bits keep a bulk import of 10,000 memories stamped in the same
    millisecond collision-free with probability > 1 - 2e-7.
    """
    millis = int(now.timestamp() * 1000) & 0xFFFF_FFFF_FFFF
    return f"mem_{millis:012x}{secrets.randbits(48):012x}"


@lru_cache(maxsize=8192)
def point_id(memory_id: str, chunk_index: int = 0) -> str:
    """Deterministic vector-point id of one chunk of a memory (idempotent re-indexing);
    remembered for the last few thousand (a recall asks for the same ids again and again)."""
    return str(uuid.uuid5(_POINT_NAMESPACE, f"{memory_id}#{chunk_index}"))


def is_valid_memory_id(value: str) -> bool:
    return bool(MEMORY_ID_PATTERN.match(value))
