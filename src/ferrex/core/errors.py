"""Errors the agent sees: a stable ``code`` plus a message that says what to do."""

from __future__ import annotations

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
