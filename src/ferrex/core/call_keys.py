"""Exactly-once writes across an engine handover.

A ferrex process that forwards a write (store, forget) to the engine process of its data dir
gives it a key (``ferrex.runtime.shared``: on the internal link only; no tool takes one). The
write records the key and its answer in its own SQLite transaction, so when the engine dies
before answering and the call is sent again (to the process that took over), the key tells
whether the first attempt was applied: if it was, its answer is returned (same id), never a
duplicate refusal or a second copy; if not, nothing of it exists and the write is applied now.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, TypeVar

from pydantic import TypeAdapter

from ferrex.core.clock import utcnow
from ferrex.core.ports import MetadataStore
from ferrex.core.results import ForgetResult, StoreOutcome

# A retry comes within seconds (the time a process takes to take the store over): a day is
# ample, and keeps the table small.
KEEP_KEYS = timedelta(days=1)
MAX_KEY_CHARS = 80

T = TypeVar("T", StoreOutcome, ForgetResult)
_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {
    StoreOutcome: TypeAdapter(StoreOutcome),
    ForgetResult: TypeAdapter(ForgetResult),
}


def valid_key(key: Any) -> str | None:
    """A key as the link carries it (a short string), or None."""
    return key if isinstance(key, str) and 0 < len(key) <= MAX_KEY_CHARS else None


def recorded(meta: MetadataStore, key: str | None, kind: type[T]) -> T | None:
    """The answer of the call applied under ``key`` (None: no call with it was applied)."""
    if key is None:
        return None
    text = meta.call_answer(key)
    if text is None:
        return None
    answer: T = _ADAPTERS[kind].validate_json(text)
    return answer


def record(meta: MetadataStore, key: str | None, op: str, namespace: str, answer: T) -> None:
    """Record ``answer`` under ``key``; call it inside the write's transaction."""
    if key is None:
        return
    now = utcnow()  # wall time: keys age in real time, whatever the service's clock says
    text = _ADAPTERS[type(answer)].dump_json(answer).decode()
    meta.record_call(key, op, namespace, text, now, now - KEEP_KEYS)
