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
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, Literal

from ferrex.core import errors
from ferrex.core.errors import FerrexError

if TYPE_CHECKING:
    from ferrex.core.requests import StoreRequest

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


# --------------------------------------------------------------------------- token formats

# detect-secrets' detectors by their secret type -> the kind ferrex names in its marker.
_DETECT_SECRETS_KINDS = {
    "Artifactory Credentials": "artifactory token",
    "AWS Access Key": "aws access key",
    "Azure Storage Account access key": "azure storage key",
    "Basic Auth Credentials": "password in url",
    "Cloudant Credentials": "cloudant credential",
    "Discord Bot Token": "discord bot token",
    "GitHub Token": "github token",
    "GitLab Token": "gitlab token",
    "IBM Cloud IAM Key": "ibm cloud iam key",
    "IBM COS HMAC Credentials": "ibm cos hmac key",
    "JSON Web Token": "json web token",
    "Mailchimp Access Key": "mailchimp key",
    "NPM tokens": "npm token",
    "OpenAI Token": "openai key",
    "PyPI Token": "pypi token",
    "SendGrid API Key": "sendgrid key",
    "Slack Token": "slack token",
    "SoftLayer Credentials": "softlayer credential",
    "Square OAuth Secret": "square oauth secret",
    "Stripe Access Key": "stripe key",
    "Telegram Bot Token": "telegram bot token",
    "Twilio API Key": "twilio key",
}

_B = r"(?<![A-Za-z0-9_\-])"  # no token character before
_E = r"(?![A-Za-z0-9_\-])"  # no token character after

# Formats detect-secrets does not know (or knows only inside a config file's syntax).
_OWN_FORMATS: dict[str, list[str]] = {
    "private key": [
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
        r"(?:[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|[\s\S]*)",
    ],
    "aws secret key": [
        r"(?i:aws)[\w .-]{0,30}?(?i:secret|key)[\w .-]{0,20}?(?:\s|[:=\"'`])\s*[\"'`]?"
        r"(?-i:([A-Za-z0-9/+]{40}))(?![A-Za-z0-9/+=])",
    ],
    "github token": [_B + r"github_pat_[A-Za-z0-9_]{60,}" + _E],
    "anthropic key": [_B + r"sk-ant-[a-z]{2,8}\d{2}-[A-Za-z0-9_\-]{40,}" + _E],
    "openai key": [_B + r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{40,}" + _E],
    "stripe key": [
        _B + r"(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{24,}" + _E,
        _B + r"whsec_[0-9A-Za-z]{32,}" + _E,
    ],
    "google api key": [_B + r"AIza[0-9A-Za-z_\-]{35}" + _E],
    "google oauth secret": [_B + r"GOCSPX-[0-9A-Za-z_\-]{28}" + _E],
    "npm token": [_B + r"npm_[A-Za-z0-9]{36}" + _E],
    "slack token": [_B + r"xapp-\d-[A-Z0-9]+-\d+-[a-f0-9]+" + _E],
    "hugging face token": [_B + r"hf_[A-Za-z0-9]{34,}" + _E],
    "digitalocean token": [_B + r"do[opr]_v1_[a-f0-9]{64}" + _E],
    "shopify token": [_B + r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}" + _E],
    "databricks token": [_B + r"dapi[a-f0-9]{32}(?:-\d)?" + _E],
    "vault token": [_B + r"hv[sbr]\.[A-Za-z0-9_\-]{24,}" + _E],
    "terraform token": [_B + r"[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_\-=]{60,}" + _E],
    "doppler token": [_B + r"dp\.(?:st|ct|sa|scim|audit)\.[A-Za-z0-9_\-.]{40,}" + _E],
    "age secret key": [_B + r"AGE-SECRET-KEY-1[0-9A-Z]{58}" + _E],
    "linear key": [_B + r"lin_api_[A-Za-z0-9]{40}" + _E],
    "postman key": [_B + r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}" + _E],
    "mailgun key": [_B + r"key-[0-9a-f]{32}" + _E],
    "new relic key": [_B + r"NRAK-[A-Z0-9]{27}" + _E],
    "gitlab token": [_B + r"glptt-[A-Za-z0-9_\-]{20,}" + _E],
    "firebase server key": [_B + r"AAAA[A-Za-z0-9_\-]{7}:[A-Za-z0-9_\-]{140}" + _E],
    "api key": [r"(?i:\bauthorization:\s*key)=([A-Za-z0-9_:\-]{20,})"],
    "sentry token": [_B + r"sntry[us]_[A-Za-z0-9_=+/\-]{40,}" + _E],
    "discord webhook": [
        r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/([A-Za-z0-9_\-]{20,})"
    ],
    "atlassian token": [_B + r"ATATT3[A-Za-z0-9_\-=]{100,}" + _E],
    # A URL's password, the user name empty or not (detect-secrets needs a user).
    "password in url": [r"\b[a-z][a-z0-9+.\-]*://[^\s:/@]*:([^\s:/@]{3,})@"],
    "azure sas signature": [r"[?&]sig=([A-Za-z0-9%+/]{30,}={0,2})"],
    "azure storage key": [r"(?i:AccountKey)=([A-Za-z0-9+/]{40,}={0,2})"],
    "bearer token": [r"(?i:\bbearer)\s+([A-Za-z0-9._~+/\-]{20,}={0,2})"],
    "basic auth": [r"(?i:\bauthorization:\s*basic)\s+([A-Za-z0-9+/]{12,}={0,2})"],
}

# Shapes that name a password without a secret word before it; the value must still read as a
# credential (``_secret_value``): curl -u user:password, "login: admin / password".
_PASSWORD_SHAPES = (
    re.compile(r"(?:^|\s)(?:-u|--user)[ \t]+['\"]?[^\s:'\"]+:([^\s'\"]{3,})"),
    re.compile(
        r"(?i:\b(?:login|creds|credentials))(?:[ \t]+[^\s:=]+){0,5}?[ \t]*(?:is|are|:|=)?[ \t]*"
        r"[\w.@+\-]+[ \t]*/[ \t]*([^\s/]{6,})"
    ),
)
# A secret given as a command-line flag (mysql -p'…', az login -p …, ldapsearch -w …): the value
# must be strong, as "-p 8080" is a port and "-w 5" a wait.
_SECRET_FLAG = re.compile(
    r"(?:^|\s)(?:-p|-w|--password|--passwd|--pass|--secret|--token|--api-key|--client-secret)"
    r"(?![\w-])(?:[ \t]+|=)?([\"']?)(?P<value>[^\s'\"]{6,200})\1"
)

# --------------------------------------------------------------------------- named values

_SECRET_WORDS = (
    r"pass(?:word|wd|phrase|code)|pwd|pw|secret(?:[ _-]?(?:access[ _-]?)?key)?|client[ _-]?secret"
    r"|api[ _-]?(?:key|token|secret)|apikey|access[ _-]?(?:key|token)|auth[ _-]?token"
    r"|(?:bot|bearer|refresh|session|personal[ _-]access|deploy)[ _-]?token|token"
    r"|private[ _-]?key|signing[ _-]?key|encryption[ _-]?key|master[ _-]?key|credentials?"
    # the same words in other languages agents are spoken to in
    r"|passwort|kennwort|mot de passe|contrase[nñ]a|clave|senha|parola d'ordine|wachtwoord"
    r"|l[oö]senord|пароль|パスワード|密码|密碼|비밀번호"
    # network gear: a pre-shared key, an SNMP community string
    r"|psk|pre-?shared[ _-]?key|community[ _-]?string|snmp-server community"
)
# KEYWORD (then at most four words, e.g. "password for prod") CONNECTOR VALUE.
_NAMED = re.compile(
    rf"(?i:(?<![a-z])(?P<word>{_SECRET_WORDS})(?![a-z]))"
    r"(?:[\"'`]?\]?)"
    # up to four words before the connector ("the passphrase we use is …"); none ends a sentence
    r"(?P<gap>(?:[ \t]+[\w\-/@']+(?:\.[\w\-/@']+)*){0,4}?)"
    r"[ \t]*(?P<conn>=|:|(?i:\bis\b|\bwas\b|\bto\b|\bare\b|\best\b|\bist\b|\bes\b|\bé\b"
    r"|\blautet\b)|は|是|为|=>|->)"
    r"[ \t]*(?:(?i:now|still|currently|set to|changed to)[ \t]+)?"
    r"(?P<value>\"[^\"\n]{1,200}\"|'[^'\n]{1,200}'|`[^`\n]{1,200}`|«[^»\n]{1,200}»"
    r"|[^\s\"'`]{1,200})"
)
# A secret word right before a value that could be nothing but a credential ("the initial
# password Falcon#Copper637"): no connector, so the value must be strong (``_strong_value``).
_NAMED_BARE = re.compile(
    rf"(?i:(?<![a-z])(?P<word>{_SECRET_WORDS})(?![a-z]))[ \t]+"
    r"(?P<value>\"[^\"\n]{8,200}\"|'[^'\n]{8,200}'|«[^»\n]{8,200}»|[^\s\"'`]{8,200})"
)
# A strong value after a connector later in the sentence that names a secret ("the jenkins
# admin password is same like before, it is M@ng0188*", "Passwort für den NAS (im Keller):
# …"): within eight words, no sentence end between.
_NAMED_LATER = re.compile(
    rf"(?i:(?<![a-z])(?P<word>{_SECRET_WORDS})(?![a-z]))"
    r"(?:[ \t,;]+[^\s]*[^\s.!?]){1,8}?"
    r"(?:[:=]|[ \t]+(?i:is|was|est|ist|es|é|lautet|は|是|为))[ \t]+"
    r"(?P<value>\"[^\"\n]{8,200}\"|'[^'\n]{8,200}'|«[^»\n]{8,200}»|[^\s\"'`]{8,200})"
)
# A PIN: the word in capitals (the verb "pin" is everyday language) and four to eight digits.
_PIN = re.compile(r"\bPIN(?:[ \t]+code)?[ \t]*(?:is|:|=)[ \t]*(\d{4,8})\b")
_WORD_KIND = {
    "pass": "password",
    "pw": "password",
    "secret": "secret",
    "client": "client secret",
    "api": "api key",
    "apikey": "api key",
    "access": "access key",
    "private": "private key",
    "signing": "signing key",
    "encryption": "encryption key",
    "master": "master key",
    "credential": "credential",
    "psk": "pre-shared key",
    "pre": "pre-shared key",
    "community": "snmp community",
    "snmp": "snmp community",
}
_PLACEHOLDER = re.compile(
    r"(?i)^(?:<[^>]*>|\$\{[^}]*\}|\{\{[^}]*\}\}|(?-i:\$[A-Z_][A-Z0-9_]*|%[A-Z_]+%|[A-Z][A-Z0-9_]*)"
    r"|(.)\1{3,}|\*+|x+|\.\.\.|…|null|none|nil|undefined|empty|true|false|n/?a|tbd|redacted"
    r"|\[redacted[^\]]*\]?|.*(?:example|placeholder|your[_-]|changeme|dummy|sample|fake).*)$"
)
# A template or a filler in place of a value: ${DB_PASS}, {{ token }}, <key>, xxxxxx, 000000.
_TEMPLATE = re.compile(r"\$\{[^}]*\}|\{\{[^}]*\}\}|<[^>\s]+>|%[A-Z_]+%")
_FILLER = re.compile(r"([A-Za-z0-9*.])\1{5,}")
# Vendors' documented sample credentials (AKIAIOSFODNN7EXAMPLE) are not secrets.
_DOCUMENTED = re.compile(r"EXAMPLE|(?i:example|placeholder)")
_TRAILING = ".,;:!?)]}>"

# --------------------------------------------------------------------------- entropy

_BASE64ISH = re.compile(
    r"(?<![A-Za-z0-9+/=_\-.:])([A-Za-z0-9+/_\-]{32,}={0,2})(?![A-Za-z0-9+/=_\-])"
)
_DIGEST_LABEL = re.compile(r"(?i)(?:sha1|sha224|sha256|sha384|sha512|md5|blake2b?|sri)[-:=]\s*$")
# Labels that say a string is an identifier or data, not a key (entropy alone only).
_DATA_LABEL = re.compile(
    r"(?i)\b(?:ids?|request[ _-]?id|trace|span|cursor|etag|hash|digest|checksum|fingerprint"
    r"|public|pubkey|payload|nonce|salt)\b[^\n]{0,12}$"
)
_PUBLIC_KEY_LABEL = re.compile(
    r"(?:ssh-(?:rsa|ed25519|dss)|ecdsa-sha2-nistp\d+|sk-ssh-ed25519@openssh\.com)\s+$"
)
_PUBLIC_BLOCK = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*(?:PUBLIC KEY|CERTIFICATE)-----[\s\S]*?-----END [A-Z0-9 ]+-----"
)
_DIGEST_PREFIX = re.compile(r"(?i)(?:sha1|sha224|sha256|sha384|sha512|md5|blake2b?)[-_:]")
_HEX = re.compile(r"^[0-9a-fA-F\-]+$")
_ULID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")
_ENTROPY_MIN = 4.5  # detect-secrets' default limit for base64 strings


def shannon_entropy(text: str) -> float:
    """Bits per character of ``text`` over its own symbols."""
    if not text:
        return 0.0
    counts: dict[str, int] = {}
    for char in text:
        counts[char] = counts.get(char, 0) + 1
    size = len(text)
    return -sum(n / size * math.log2(n / size) for n in counts.values())


def _random_looking(token: str) -> bool:
    if _HEX.match(token) or _ULID.match(token.upper()):
        return False
    kinds = (str.islower, str.isupper, str.isdigit)
    every_kind = all(any(test(c) for c in token) for test in kinds)
    return every_kind and shannon_entropy(token) >= _ENTROPY_MIN


# --------------------------------------------------------------------------- the scanner


@cache
def _detect_secrets_patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    """detect-secrets' regular-expression detectors, by ferrex kind (imported on first use)."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    out: list[tuple[str, re.Pattern[str]]] = []
    plugins: dict[str, Any] = get_mapping_from_secret_type_to_class()
    for secret_type, plugin in plugins.items():
        kind = _DETECT_SECRETS_KINDS.get(secret_type)
        if kind is None:  # entropy, keyword and public-IP detectors: handled here, or not secrets
            continue
        out.extend((kind, pattern) for pattern in getattr(plugin, "denylist", ()))
    return tuple(out)


@cache
def _own_patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple(
        (kind, re.compile(pattern))
        for kind, patterns in _OWN_FORMATS.items()
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
            (_NAMED, _secret_value),
            (_NAMED_BARE, _strong_value),
            (_NAMED_LATER, _strong_value),
        )
        for pattern, check in named:
            for match in pattern.finditer(text):
                found = _value_span(match)
                if found is not None and check(found[2]):
                    yield Finding(_kind_of(match.group("word")), found[0], found[1])
        for shape in _PASSWORD_SHAPES:
            for match in shape.finditer(text):
                if _secret_value(match.group(1)):
                    yield Finding("password", *match.span(1))
        for match in _SECRET_FLAG.finditer(text):
            if _strong_value(match.group("value")):
                yield Finding("password", *match.span("value"))
        for match in _PIN.finditer(text):
            yield Finding("pin", *match.span(1))

    def _entropy(self, text: str) -> Iterable[Finding]:
        public = [m.span() for m in _PUBLIC_BLOCK.finditer(text)]
        for match in _BASE64ISH.finditer(text):
            token = match.group(1)
            start = match.start(1)
            before = text[max(0, start - 24) : start]
            if _DIGEST_LABEL.search(before) or _DIGEST_PREFIX.match(token):
                continue
            if _DATA_LABEL.search(before) or _PUBLIC_KEY_LABEL.search(before):
                continue
            if any(a <= start < b for a, b in public) or _decodes_to_text(token):
                continue
            if _random_looking(token.rstrip("=")):
                yield Finding("high entropy string", start, match.end(1))

    def _merge(self, text: str, found: list[Finding]) -> list[Finding]:
        out: list[Finding] = []
        for finding in sorted(found, key=lambda f: (f.start, -(f.end - f.start))):
            if out and finding.start < out[-1].end:
                continue
            value = text[finding.start : finding.end]
            if _MARKER_RE.fullmatch(value) or _DOCUMENTED.search(value):
                continue
            if _TEMPLATE.search(value) or _FILLER.search(value):  # ${DB_PASS}, ghp_xxxxxxxx
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
    if _PLACEHOLDER.match(value):
        return None
    while value and value[-1] in _TRAILING:
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
    if len(value) < 8 or "/" in value or _PLACEHOLDER.match(value) or _NOT_A_SECRET.search(value):
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
    if len(value) < 6 or _PLACEHOLDER.match(value) or _MARKER_RE.search(value):
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


_NAMING = re.compile(rf"(?i)(?:^|[^a-z])({_SECRET_WORDS})(?:$|[^a-z])")


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
    for prefix, kind in _WORD_KIND.items():
        if lowered.startswith(prefix):
            return kind
    return "secret"


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
MEMORY_TEXT_FIELDS = (
    "content",
    "subject",
    "predicate",
    "object",
    "name",
    "conditions",
    "steps",
    "context",
    "source",
)
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
