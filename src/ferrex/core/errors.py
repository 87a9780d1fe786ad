"""Errors the agent sees: a stable ``code`` plus a message that says what to do."""

from __future__ import annotations

import errno
from typing import Any


class FerrexError(Exception):
    """A refusal or failure reported to the caller as an MCP tool error.

    ``code`` is stable (clients may branch on it); ``message`` is for humans and agents and
    never contains stack traces or filesystem paths.
    """

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.details}


# Stable error codes.
INVALID_PARAMS = "invalid_params"
MISSING_FIELD = "missing_field"
UNKNOWN_TYPE = "unknown_type"
EMPTY_QUERY = "empty_query"
TOO_LARGE = "too_large"
EPISODIC_TOO_LONG = "episodic_too_long"
DUPLICATE = "duplicate"
NOT_FOUND = "not_found"
NOT_CURRENT = "not_current"
INVALID_NAMESPACE = "invalid_namespace"
MODEL_MISMATCH = "model_mismatch"
MODEL_UNAVAILABLE = "model_unavailable"
UNKNOWN_TOOL = "unknown_tool"
UNAVAILABLE = "unavailable"
INTERNAL = "internal_error"
STORAGE_FULL = "storage_full"
SECRET_DETECTED = "secret_detected"


class StorageSpaceError(OSError):
    """The disk holding the store cannot back what the store needs (``errno`` ENOSPC):
    ``needed`` bytes free for ``what``, ``free`` now (None: unknown). Raised by the adapters
    before they touch the disk, so nothing is half-done; answered as ``storage_full``."""

    def __init__(self, needed: int, free: int | None, what: str) -> None:
        self.needed = needed
        self.free = free
        self.what = what
        super().__init__(errno.ENOSPC, self.describe())

    def describe(self) -> str:
        mib = 1024 * 1024
        needed = max(1, -(-self.needed // mib))  # rounded up: never "needs 0 MB"
        free = "?" if self.free is None else f"{self.free // mib}"
        return (
            f"the disk holding the memory store is full: {self.what} needs {needed} MB free "
            f"({free} MB free now)"
        )


def storage_full(space: StorageSpaceError | None = None, *, opening: bool = False) -> FerrexError:
    """The agent's ``storage_full`` (no path), with the space needed when it is known.
    ``opening``: the store could not open (or be created) at all."""
    said = space.describe() if space is not None else "the disk holding the memory store is full"
    if opening or (space is not None and space.what.startswith(("opening", "creating"))):
        return FerrexError(
            STORAGE_FULL,
            f"{said}, so it was not opened. Free some space on it (or move the data dir to a "
            "larger disk) and try again.",
        )
    return FerrexError(
        STORAGE_FULL,
        f"{said}: nothing was stored. Free some space on it (or move the data dir to a larger "
        "disk) and try again; recall still answers.",
    )
