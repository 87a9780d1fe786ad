"""What a secret looks like: token formats (detect-secrets' kinds and ferrex's own), values named
by a secret word, and the gated entropy test (the three layers of ``scanner``)."""

from __future__ import annotations

import math
import re

# --------------------------------------------------------------------------- token formats

# detect-secrets' detectors by their secret type -> the kind ferrex names in its marker.
DETECT_SECRETS_KINDS = {
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

B = r"(?<![A-Za-z0-9_\-])"  # no token character before
E = r"(?![A-Za-z0-9_\-])"  # no token character after

# Formats detect-secrets does not know (or knows only inside a config file's syntax).
OWN_FORMATS: dict[str, list[str]] = {
    "private key": [
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
        r"(?:[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|[\s\S]*)",
    ],
    "aws secret key": [
        r"(?i:aws)[\w .-]{0,30}?(?i:secret|key)[\w .-]{0,20}?(?:\s|[:=\"'`])\s*[\"'`]?"
        r"(?-i:([A-Za-z0-9/+]{40}))(?![A-Za-z0-9/+=])",
    ],
    "github token": [B + r"github_pat_[A-Za-z0-9_]{60,}" + E],
    "anthropic key": [B + r"sk-ant-[a-z]{2,8}\d{2}-[A-Za-z0-9_\-]{40,}" + E],
    "openai key": [B + r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{40,}" + E],
    "stripe key": [
        B + r"(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{24,}" + E,
        B + r"whsec_[0-9A-Za-z]{32,}" + E,
    ],
    "google api key": [B + r"AIza[0-9A-Za-z_\-]{35}" + E],
    "google oauth secret": [B + r"GOCSPX-[0-9A-Za-z_\-]{28}" + E],
    "npm token": [B + r"npm_[A-Za-z0-9]{36}" + E],
    "slack token": [B + r"xapp-\d-[A-Z0-9]+-\d+-[a-f0-9]+" + E],
    "hugging face token": [B + r"hf_[A-Za-z0-9]{34,}" + E],
    "digitalocean token": [B + r"do[opr]_v1_[a-f0-9]{64}" + E],
    "shopify token": [B + r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}" + E],
    "databricks token": [B + r"dapi[a-f0-9]{32}(?:-\d)?" + E],
    "vault token": [B + r"hv[sbr]\.[A-Za-z0-9_\-]{24,}" + E],
    "terraform token": [B + r"[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_\-=]{60,}" + E],
    "doppler token": [B + r"dp\.(?:st|ct|sa|scim|audit)\.[A-Za-z0-9_\-.]{40,}" + E],
    "age secret key": [B + r"AGE-SECRET-KEY-1[0-9A-Z]{58}" + E],
    "linear key": [B + r"lin_api_[A-Za-z0-9]{40}" + E],
    "postman key": [B + r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}" + E],
    "mailgun key": [B + r"key-[0-9a-f]{32}" + E],
    "new relic key": [B + r"NRAK-[A-Z0-9]{27}" + E],
    "gitlab token": [B + r"glptt-[A-Za-z0-9_\-]{20,}" + E],
    "firebase server key": [B + r"AAAA[A-Za-z0-9_\-]{7}:[A-Za-z0-9_\-]{140}" + E],
    "api key": [r"(?i:\bauthorization:\s*key)=([A-Za-z0-9_:\-]{20,})"],
    "sentry token": [B + r"sntry[us]_[A-Za-z0-9_=+/\-]{40,}" + E],
    "discord webhook": [
        r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/([A-Za-z0-9_\-]{20,})"
    ],
    "atlassian token": [B + r"ATATT3[A-Za-z0-9_\-=]{100,}" + E],
    # A URL's password, the user name empty or not (detect-secrets needs a user).
    "password in url": [r"\b[a-z][a-z0-9+.\-]*://[^\s:/@]*:([^\s:/@]{3,})@"],
    "azure sas signature": [r"[?&]sig=([A-Za-z0-9%+/]{30,}={0,2})"],
    "azure storage key": [r"(?i:AccountKey)=([A-Za-z0-9+/]{40,}={0,2})"],
    "bearer token": [r"(?i:\bbearer)\s+([A-Za-z0-9._~+/\-]{20,}={0,2})"],
    "basic auth": [r"(?i:\bauthorization:\s*basic)\s+([A-Za-z0-9+/]{12,}={0,2})"],
}

# Shapes that name a password without a secret word before it; the value must still read as a
# credential (``_secret_value``): curl -u user:password, "login: admin / password".
PASSWORD_SHAPES = (
    re.compile(r"(?:^|\s)(?:-u|--user)[ \t]+['\"]?[^\s:'\"]+:([^\s'\"]{3,})"),
    re.compile(
        r"(?i:\b(?:login|creds|credentials))(?:[ \t]+[^\s:=]+){0,5}?[ \t]*(?:is|are|:|=)?[ \t]*"
        r"[\w.@+\-]+[ \t]*/[ \t]*([^\s/]{6,})"
    ),
)
# A secret given as a command-line flag (mysql -p'…', az login -p …, ldapsearch -w …): the value
# must be strong, as "-p 8080" is a port and "-w 5" a wait.
SECRET_FLAG = re.compile(
    r"(?:^|\s)(?:-p|-w|--password|--passwd|--pass|--secret|--token|--api-key|--client-secret)"
    r"(?![\w-])(?:[ \t]+|=)?([\"']?)(?P<value>[^\s'\"]{6,200})\1"
)

# --------------------------------------------------------------------------- named values

SECRET_WORDS = (
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
NAMED = re.compile(
    rf"(?i:(?<![a-z])(?P<word>{SECRET_WORDS})(?![a-z]))"
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
NAMED_BARE = re.compile(
    rf"(?i:(?<![a-z])(?P<word>{SECRET_WORDS})(?![a-z]))[ \t]+"
    r"(?P<value>\"[^\"\n]{8,200}\"|'[^'\n]{8,200}'|«[^»\n]{8,200}»|[^\s\"'`]{8,200})"
)
# A strong value after a connector later in the sentence that names a secret ("the jenkins
# admin password is same like before, it is M@ng0188*", "Passwort für den NAS (im Keller):
# …"): within eight words, no sentence end between.
NAMED_LATER = re.compile(
    rf"(?i:(?<![a-z])(?P<word>{SECRET_WORDS})(?![a-z]))"
    r"(?:[ \t,;]+[^\s]*[^\s.!?]){1,8}?"
    r"(?:[:=]|[ \t]+(?i:is|was|est|ist|es|é|lautet|は|是|为))[ \t]+"
    r"(?P<value>\"[^\"\n]{8,200}\"|'[^'\n]{8,200}'|«[^»\n]{8,200}»|[^\s\"'`]{8,200})"
)
# A PIN: the word in capitals (the verb "pin" is everyday language) and four to eight digits.
PIN = re.compile(r"\bPIN(?:[ \t]+code)?[ \t]*(?:is|:|=)[ \t]*(\d{4,8})\b")
WORD_KIND = {
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
PLACEHOLDER = re.compile(
    r"(?i)^(?:<[^>]*>|\$\{[^}]*\}|\{\{[^}]*\}\}|(?-i:\$[A-Z_][A-Z0-9_]*|%[A-Z_]+%|[A-Z][A-Z0-9_]*)"
    r"|(.)\1{3,}|\*+|x+|\.\.\.|…|null|none|nil|undefined|empty|true|false|n/?a|tbd|redacted"
    r"|\[redacted[^\]]*\]?|.*(?:example|placeholder|your[_-]|changeme|dummy|sample|fake).*)$"
)
# A template or a filler in place of a value: ${DB_PASS}, {{ token }}, <key>, xxxxxx, 000000.
TEMPLATE = re.compile(r"\$\{[^}]*\}|\{\{[^}]*\}\}|<[^>\s]+>|%[A-Z_]+%")
FILLER = re.compile(r"([A-Za-z0-9*.])\1{5,}")
# Vendors' documented sample credentials (AKIAIOSFODNN7EXAMPLE) are not secrets.
DOCUMENTED = re.compile(r"EXAMPLE|(?i:example|placeholder)")
TRAILING = ".,;:!?)]}>"

# --------------------------------------------------------------------------- entropy

BASE64ISH = re.compile(
    r"(?<![A-Za-z0-9+/=_\-.:])([A-Za-z0-9+/_\-]{32,}={0,2})(?![A-Za-z0-9+/=_\-])"
)
DIGEST_LABEL = re.compile(r"(?i)(?:sha1|sha224|sha256|sha384|sha512|md5|blake2b?|sri)[-:=]\s*$")
# Labels that say a string is an identifier or data, not a key (entropy alone only).
DATA_LABEL = re.compile(
    r"(?i)\b(?:ids?|request[ _-]?id|trace|span|cursor|etag|hash|digest|checksum|fingerprint"
    r"|public|pubkey|payload|nonce|salt)\b[^\n]{0,12}$"
)
PUBLIC_KEY_LABEL = re.compile(
    r"(?:ssh-(?:rsa|ed25519|dss)|ecdsa-sha2-nistp\d+|sk-ssh-ed25519@openssh\.com)\s+$"
)
PUBLIC_BLOCK = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*(?:PUBLIC KEY|CERTIFICATE)-----[\s\S]*?-----END [A-Z0-9 ]+-----"
)
DIGEST_PREFIX = re.compile(r"(?i)(?:sha1|sha224|sha256|sha384|sha512|md5|blake2b?)[-_:]")
HEX = re.compile(r"^[0-9a-fA-F\-]+$")
ULID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")
ENTROPY_MIN = 4.5  # detect-secrets' default limit for base64 strings


def shannon_entropy(text: str) -> float:
    """Bits per character of ``text`` over its own symbols."""
    if not text:
        return 0.0
    counts: dict[str, int] = {}
    for char in text:
        counts[char] = counts.get(char, 0) + 1
    size = len(text)
    return -sum(n / size * math.log2(n / size) for n in counts.values())


def random_looking(token: str) -> bool:
    if HEX.match(token) or ULID.match(token.upper()):
        return False
    kinds = (str.islower, str.isupper, str.isdigit)
    every_kind = all(any(test(c) for c in token) for test in kinds)
    return every_kind and shannon_entropy(token) >= ENTROPY_MIN
