"""Secrets in what agents store: found, named by kind, and redacted (or refused) before any rule
runs, so that no credential reaches SQLite, the index, an export or another client.

Detection has three layers, from the most to the least certain:

1. **Token formats** — credentials whose shape alone says what they are (``ghp_…``, ``AKIA…``,
   a PEM private key block, a JWT, a URL with a password). The patterns of Yelp's
   ``detect-secrets`` plugins are used where it has them (its regular-expression detectors,
   applied to spans of prose rather than lines of code); formats it lacks are added here.
2. **A value named by a keyword** — "the staging db password is Tr0ub4dor&3", ``API_KEY=…``,
   "set the token to …": a secret word, a connector (``is``, ``=``, ``:``, ``to``, ``was``) and
   a value that does not read as a word (it has digits or symbols, or mixed case). Sentences
   *about* secrets ("the password policy requires 14 characters", "the key is in the vault")
   pass: their value is a plain word, a short number or a placeholder.
3. **Entropy, gated** — a long base64-like string of high Shannon entropy with letters of both
   cases and digits. Hex strings (commit shas, checksums, image digests), UUIDs, ULIDs and
   strings labelled as a digest (``sha256:``, ``sha384-``) never count on entropy alone.

``secret_handling`` chooses what happens: ``redact`` (the default) replaces each secret in place
by ``[redacted: <kind>]``; ``refuse`` rejects the store with ``secret_detected``; ``allow`` keeps
the text. ``secrets.patterns`` adds kinds of one's own; ``secrets.allow`` lists patterns whose
matches are never secrets.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from ferrex.core.secrets.patterns import (
    BASE64ISH,
    DATA_LABEL,
    DETECT_SECRETS_KINDS,
    DIGEST_LABEL,
    DIGEST_PREFIX,
    DOCUMENTED,
    FILLER,
    NAMED,
    NAMED_BARE,
    NAMED_LATER,
    OWN_FORMATS,
    PASSWORD_SHAPES,
    PIN,
    PLACEHOLDER,
    PUBLIC_BLOCK,
    PUBLIC_KEY_LABEL,
    SECRET_FLAG,
    SECRET_WORDS,
    TEMPLATE,
    TRAILING,
    WORD_KIND,
    random_looking,
)

Handling = Literal["redact", "refuse", "allow"]

MARKER = "[redacted: {kind}]"
_MARKER_RE = re.compile(r"\[redacted: [a-z0-9 ]+\]")


@dataclass(frozen=True)
class Finding:
    """One secret in a text: its kind and where it is (``text[start:end]``)."""

    kind: str
    start: int
    end: int


@dataclass(frozen=True)
class Redaction:
    """What was taken out of a stored memory: the kind and the field, never the value."""

    kind: str
    field: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "field": self.field}


# --------------------------------------------------------------------------- the scanner


@cache
def _detect_secrets_patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    """detect-secrets' regular-expression detectors, by ferrex kind (imported on first use)."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    out: list[tuple[str, re.Pattern[str]]] = []
    plugins: dict[str, Any] = get_mapping_from_secret_type_to_class()
    for secret_type, plugin in plugins.items():
        kind = DETECT_SECRETS_KINDS.get(secret_type)
        if kind is None:  # entropy, keyword and public-IP detectors: handled here, or not secrets
            continue
        out.extend((kind, pattern) for pattern in getattr(plugin, "denylist", ()))
    return tuple(out)


@cache
def _own_patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple(
        (kind, re.compile(pattern))
        for kind, patterns in OWN_FORMATS.items()
        for pattern in patterns
    )


def _span(match: re.Match[str]) -> tuple[int, int]:
    """The secret inside a match: its first group when the pattern has one, else the match less
    the delimiters some detect-secrets patterns include."""
    if match.re.groups and len(match.group(1) or "") >= 8:  # the pattern captures the secret
        return match.span(1)
    start, end = match.span()
    text = match.string
    while start < end and text[start] in " \t\n=:\"'":
        start += 1
    while end > start and text[end - 1] in " \t\n\"'":
        end -= 1
    return start, end


class SecretScanner:
    """Finds secrets in text. ``extra``: kind -> pattern of one's own (its first group, if any,
    is the secret); ``allow``: patterns whose matches are never secrets."""

    def __init__(self, extra: Mapping[str, str] | None = None, allow: Sequence[str] = ()) -> None:
        self._extra = tuple((kind, re.compile(p)) for kind, p in (extra or {}).items())
        self._allow = tuple(re.compile(p) for p in allow)

    def find(self, text: str) -> list[Finding]:
        """Every secret in ``text``, left to right, without overlaps (the earlier and longer
        finding wins)."""
        if not text or len(text) < 8:
            return []
        found = self._merge(text, [*self._formats(text), *self._named(text), *self._entropy(text)])
        # A secret found once is a secret wherever else the text repeats it.
        again = [
            Finding(f.kind, m.start(), m.end())
            for f in found
            if f.end - f.start >= 6
            for m in re.finditer(re.escape(text[f.start : f.end]), text)
        ]
        return self._merge(text, [*found, *again]) if len(again) > len(found) else found

    def redact(self, text: str) -> tuple[str, list[str]]:
        """``text`` with every secret replaced by its marker, and the kinds replaced."""
        findings = self.find(text)
        if not findings:
            return text, []
        parts: list[str] = []
        cursor = 0
        for finding in findings:
            parts.append(text[cursor : finding.start])
            parts.append(MARKER.format(kind=finding.kind))
            cursor = finding.end
        parts.append(text[cursor:])
        return "".join(parts), [f.kind for f in findings]

    # ------------------------------------------------------------------ layers

    def _formats(self, text: str) -> Iterable[Finding]:
        for kind, pattern in (*self._extra, *_detect_secrets_patterns(), *_own_patterns()):
            for match in pattern.finditer(text):
                start, end = _span(match)
                if end - start >= 8:
                    yield Finding(kind, start, end)

    def _named(self, text: str) -> Iterable[Finding]:
        named = (
            (NAMED, _secret_value),
            (NAMED_BARE, _strong_value),
            (NAMED_LATER, _strong_value),
        )
        for pattern, check in named:
            for match in pattern.finditer(text):
                found = _value_span(match)
                if found is not None and check(found[2]):
                    yield Finding(_kind_of(match.group("word")), found[0], found[1])
        for shape in PASSWORD_SHAPES:
            for match in shape.finditer(text):
                if _secret_value(match.group(1)):
                    yield Finding("password", *match.span(1))
        for match in SECRET_FLAG.finditer(text):
            if _strong_value(match.group("value")):
                yield Finding("password", *match.span("value"))
        for match in PIN.finditer(text):
            yield Finding("pin", *match.span(1))

    def _entropy(self, text: str) -> Iterable[Finding]:
        public = [m.span() for m in PUBLIC_BLOCK.finditer(text)]
        for match in BASE64ISH.finditer(text):
            token = match.group(1)
            start = match.start(1)
            before = text[max(0, start - 24) : start]
            if DIGEST_LABEL.search(before) or DIGEST_PREFIX.match(token):
                continue
            if DATA_LABEL.search(before) or PUBLIC_KEY_LABEL.search(before):
                continue
            if any(a <= start < b for a, b in public) or _decodes_to_text(token):
                continue
            if random_looking(token.rstrip("=")):
                yield Finding("high entropy string", start, match.end(1))

    def _merge(self, text: str, found: list[Finding]) -> list[Finding]:
        out: list[Finding] = []
        for finding in sorted(found, key=lambda f: (f.start, -(f.end - f.start))):
            if out and finding.start < out[-1].end:
                continue
            value = text[finding.start : finding.end]
            if _MARKER_RE.fullmatch(value) or DOCUMENTED.search(value):
                continue
            if TEMPLATE.search(value) or FILLER.search(value):  # ${DB_PASS}, ghp_xxxxxxxx
                continue
            if any(a.search(value) for a in self._allow):
                continue
            out.append(finding)
        return out


def _value_span(match: re.Match[str]) -> tuple[int, int, str] | None:
    """The named value of a match, unquoted and without trailing punctuation; None for a
    placeholder."""
    start, end = match.span("value")
    value = match.group("value")
    if len(value) > 1 and ((value[0] in "\"'`" and value[-1] == value[0]) or value[0] == "«"):
        inner = value[1:-1]
        start, end = (
            start + 1 + len(inner) - len(inner.lstrip()),
            end - 1 - (len(inner) - len(inner.rstrip())),
        )
        value = inner.strip()
    if PLACEHOLDER.match(value):
        return None
    while value and value[-1] in TRAILING:
        value, end = value[:-1], end - 1
    return start, end, value


# Dates, times, versions and ticket keys have three kinds of characters too.
_NOT_A_SECRET = re.compile(
    r"^\d{4}-\d{2}-\d{2}|^\d{1,2}:\d{2}|^v?\d+(?:\.\d+)+(?:[-+][\w.]+)?$|^[A-Z][A-Z0-9]+-\d+$"
    r"|^\w+\(|^[\w.]+\.(?:py|js|ts|md|json|ya?ml|toml|env|sh)$|@[\w-]+\.[a-z]{2,}|://"
    r"|\[[A-Za-z0-9]-[A-Za-z0-9]|\\[sdwSDW]|\{\d+,?\d*\}?$|\(\?"  # a regular expression
)


def _strong_value(value: str) -> bool:
    """A value no word or identifier looks like: 8+ characters of at least three of lower
    case, upper case, digits and symbols, and not a path or a URL."""
    if len(value) < 8 or "/" in value or PLACEHOLDER.match(value) or _NOT_A_SECRET.search(value):
        return False
    classes = (str.islower, str.isupper, str.isdigit, lambda c: not c.isalnum())
    return sum(any(test(c) for c in value) for test in classes) >= 3


def _decodes_to_text(token: str) -> bool:
    """Base64 of readable text (a cursor, a JSON payload) is data, not a key: random key bytes
    decode to binary."""
    padded = token + "=" * (-len(token) % 4)
    for decode in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            raw = decode(padded)
        except (ValueError, binascii.Error):
            continue
        if len(raw) >= 12 and sum(32 <= b < 127 for b in raw) >= 0.9 * len(raw):
            return True
    return False


def _secret_value(value: str) -> bool:
    """Whether a value named by a secret word reads as a credential rather than a word."""
    if len(value) < 6 or PLACEHOLDER.match(value) or _MARKER_RE.search(value):
        return False
    if _NOT_A_SECRET.search(value):
        return False
    if any(c.isspace() for c in value):  # words: prose, or a passphrase told from prose by no rule
        return False
    has_digit = any(c.isdigit() for c in value)
    has_symbol = any(not c.isalnum() for c in value)
    mixed = any(c.islower() for c in value) and any(c.isupper() for c in value[1:])
    if value.replace("-", "").isdigit():  # a bare number: a PIN only when long enough
        return len(value) >= 8
    if "/" in value and value.count("/") >= 2 and not has_digit:  # a path: where it is kept
        return False
    return has_digit or has_symbol or mixed or len(value) >= 20


_NAMING = re.compile(rf"(?i)(?:^|[^a-z])({SECRET_WORDS})(?:$|[^a-z])")


def named_value_kind(name: str, value: Any) -> str | None:
    """The kind of secret ``value`` is when a name (a dict key, a fact's predicate) says it
    is one and the value reads as a credential; None otherwise."""
    if not isinstance(value, str):
        return None
    match = _NAMING.search(name.replace("_", " "))
    if match is None or not _secret_value(value.strip()):
        return None
    return _kind_of(match.group(1))


def _kind_of(word: str) -> str:
    lowered = word.lower().replace("_", " ").replace("-", " ")
    if "token" in lowered:
        return "token"
    for prefix, kind in WORD_KIND.items():
        if lowered.startswith(prefix):
            return kind
    return "secret"
