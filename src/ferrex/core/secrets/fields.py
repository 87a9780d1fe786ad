"""Secrets in a memory's fields: every text field of a store request or a stored memory scanned,
redacted field by field, or the store refused (``secret_handling``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ferrex.core import errors
from ferrex.core.errors import FerrexError
from ferrex.core.memory import TEXT_FIELDS

if TYPE_CHECKING:
    from ferrex.core.requests import StoreRequest

from ferrex.core.secrets.scanner import (
    MARKER,
    Handling,
    Redaction,
    SecretScanner,
    named_value_kind,
)

# --------------------------------------------------------------------------- store fields


def scan_fields(
    scanner: SecretScanner, fields: Mapping[str, Any]
) -> tuple[dict[str, Any], list[Redaction]]:
    """Redact every string in ``fields`` (strings, lists of strings, JSON-like dicts); return
    the changed fields only and what was redacted, field by field (dict keys as ``context.key``,
    list items as ``steps[2]``)."""
    changed: dict[str, Any] = {}
    redactions: list[Redaction] = []
    for name, value in fields.items():
        new, found = _scan_value(scanner, name, value)
        if found:
            changed[name] = new
            redactions.extend(found)
    return changed, redactions


def _scan_value(scanner: SecretScanner, path: str, value: Any) -> tuple[Any, list[Redaction]]:
    if isinstance(value, str):
        text, kinds = scanner.redact(value)
        return text, [Redaction(kind, path) for kind in dict.fromkeys(kinds)]
    if isinstance(value, list):
        items: list[Any] = []
        found: list[Redaction] = []
        for i, item in enumerate(value):
            new, more = _scan_value(scanner, f"{path}[{i + 1}]", item)
            items.append(new)
            found.extend(more)
        return items, found
    if isinstance(value, dict):
        mapping: dict[str, Any] = {}
        found = []
        for key, item in value.items():
            kind = named_value_kind(str(key), item)
            if kind is not None:  # {"db_password": "…"}: the key names the secret
                mapping[key] = MARKER.format(kind=kind)
                found.append(Redaction(kind, f"{path}.{key}"))
                continue
            new, more = _scan_value(scanner, f"{path}.{key}", item)
            mapping[key] = new
            found.extend(more)
        return mapping, found
    return value, []


# A memory's text fields (a store request has these and ``entities``).
MEMORY_TEXT_FIELDS = TEXT_FIELDS
STORE_TEXT_FIELDS = (*MEMORY_TEXT_FIELDS, "entities")


def find_in_fields(
    scanner: SecretScanner, fields: Mapping[str, Any], predicate: str | None
) -> tuple[dict[str, Any], list[Redaction]]:
    """The redacted values of the text ``fields`` that hold secrets, and what was redacted;
    a fact whose ``predicate`` names a secret ("staging db password") has its whole object
    redacted when it reads as a credential."""
    changed, redactions = scan_fields(scanner, {k: v for k, v in fields.items() if v})
    kind = named_value_kind(predicate or "", changed.get("object", fields.get("object")))
    if kind is not None:
        changed["object"] = MARKER.format(kind=kind)
        redactions.append(Redaction(kind, "object"))
    return changed, redactions


def screen_store(
    request: StoreRequest, scanner: SecretScanner, handling: Handling
) -> tuple[StoreRequest, list[Redaction]]:
    """The request with its secrets redacted (``redact``), or a ``secret_detected`` refusal
    (``refuse``); ``allow`` returns it as it is. Runs before every other store rule."""
    if handling == "allow":
        return request, []
    fields = {name: getattr(request, name) for name in STORE_TEXT_FIELDS}
    changed, redactions = find_in_fields(scanner, fields, request.predicate)
    if not redactions:
        return request, []
    if handling == "refuse":
        found = ", ".join(f"{r.kind} in {r.field}" for r in redactions)
        raise FerrexError(
            errors.SECRET_DETECTED,
            f"store: this looks like a credential ({found}); nothing was stored. Store where "
            "the secret is kept (a vault path, a password manager item) instead of its value",
            redacted=[r.to_dict() for r in redactions],
        )
    return request.model_copy(update=changed), redactions
