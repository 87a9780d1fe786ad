"""What ``ferrex doctor``'s secret scan covered last time (the meta key ``secret_scan``), so
that the next one reads only what was written since: the store's positions in its record of
text writes and in the audit log (``TextWrites``: insertions and in-place rewrites alike), the
ids of the memories and the audit seqs found holding secrets (ids only, never a value: they are
read again, as they may have been redacted, forgotten or purged since), and a fingerprint of
everything the verdict depends on. A different fingerprint, or no readable marker, and the
scan is a full one. docs/secrets.md."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from ferrex import __version__
from ferrex.config.core import CoreSettings
from ferrex.core.secrets.fields import MEMORY_TEXT_FIELDS

KEY = "secret_scan"
FORMAT = 1
_RULES = Path(__file__).parent  # the scanner, its patterns, the fields it reads, the sweep


@dataclass
class ScanMarker:
    fingerprint: str
    writes: int  # the position in the store's record of text writes scanned up to
    audit: int  # the last audit seq scanned
    holders: list[str] = field(default_factory=list)
    audit_hits: list[int] = field(default_factory=list)

    def dumps(self) -> str:
        return json.dumps({"format": FORMAT, **asdict(self)}, separators=(",", ":"))


def fingerprint(settings: CoreSettings) -> str:
    """What a verdict depends on: the configured patterns and allow list, secret_handling, the
    fields scanned, detect-secrets' and ferrex's versions, and the source of the rules
    themselves (any change to ``core/secrets/`` makes the next scan a full one)."""
    digest = hashlib.sha256()
    config = {
        "format": FORMAT,
        "patterns": settings.secrets.patterns,
        "allow": list(settings.secrets.allow),
        "handling": settings.secret_handling,
        "fields": MEMORY_TEXT_FIELDS,
        "detect_secrets": _version("detect-secrets"),
        "ferrex": __version__,
    }
    digest.update(json.dumps(config, sort_keys=True).encode())
    for path in sorted(_RULES.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:32]


def load(text: str | None, expected: str) -> tuple[ScanMarker | None, str]:
    """The marker stored as ``text`` if it is readable and of ``expected`` fingerprint; else
    None and why a full scan."""
    if text is None:
        return None, "no earlier scan"
    try:
        raw: Any = json.loads(text)
        marker = ScanMarker(
            fingerprint=str(raw["fingerprint"]),
            writes=_count(raw["writes"]),
            audit=_count(raw["audit"]),
            holders=[str(i) for i in _list(raw["holders"])],
            audit_hits=[_count(s) for s in _list(raw["audit_hits"])],
        )
        if raw["format"] != FORMAT:
            raise ValueError("format")
    except (ValueError, TypeError, KeyError):
        return None, "the earlier scan's record is unreadable"
    if marker.fingerprint != expected:
        return None, "the scanner or its settings changed"
    return marker, ""


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("not a position")
    return value


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError("not a list")
    return value


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return ""
