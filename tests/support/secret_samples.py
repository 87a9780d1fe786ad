"""Secret-looking test values, built at run time so that the repository itself trips no secret
scanner: every credential below is assembled from a seeded random generator and fragments.

``SECRETS``: (kind ferrex names, text an agent might store, the secret inside it).
``NEAR_MISSES``: texts that look like credentials but are not (hashes, ids, placeholders,
sentences about passwords); nothing in them may be redacted.
"""

from __future__ import annotations

import base64
import random
import string

_rng = random.Random(20261206)

LOWER = string.ascii_lowercase
UPPER = string.ascii_uppercase
DIGITS = string.digits
ALNUM = LOWER + UPPER + DIGITS
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"


def r(alphabet: str, n: int) -> str:
    """``n`` random characters of ``alphabet``, with at least one of each class it offers."""
    while True:
        out = "".join(_rng.choice(alphabet) for _ in range(n))
        classes = [c for c in (LOWER, UPPER, DIGITS) if set(c) & set(alphabet)]
        if n < 8 or all(set(out) & set(c) for c in classes):
            return out


def _join(*parts: str) -> str:
    return "".join(parts)


def _jwt() -> str:
    head = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').decode().rstrip("=")
    body = base64.urlsafe_b64encode(b'{"sub":"svc-billing","exp":1893456000}').decode()
    return f"{head}.{body.rstrip('=')}.{r(URLSAFE, 43)}"


def _pem(label: str) -> str:
    lines = "\n".join(r(B64, 64) for _ in range(4))
    dashes = "-" * 5
    return f"{dashes}BEGIN {label}{dashes}\n{lines}\n{dashes}END {label}{dashes}"


_PASSWORD = _join("Tr0", "ub4", "dor&", str(_rng.randint(10, 99)))
_AWS_ID = _join("AK", "IA", r(UPPER + DIGITS, 16))
_AWS_SECRET = r(B64, 40)
_AZURE_KEY = r(B64, 86) + "=="
_BASIC = base64.b64encode(_join("deploy", ":", r(ALNUM, 14)).encode()).decode()

# (kind, text, secret)
SECRETS: list[tuple[str, str, str]] = [
    ("password", "the staging db password is {s} until Friday", _PASSWORD),
    ("aws access key", "CI uses the access key id {s} for the deploy role", _AWS_ID),
    ("aws secret key", "aws_secret_access_key = {s}", _AWS_SECRET),
    ("github token", "Renovate runs with {s} as its token", _join("gh", "p_", r(ALNUM, 36))),
    ("github token", "the fine-grained PAT is {s}", _join("github", "_pat_", r(ALNUM + "_", 82))),
    ("gitlab token", "mirror pushes with {s}", _join("gl", "pat-", r(URLSAFE, 20))),
    (
        "slack token",
        "the alerts bot posts with {s}",
        _join("xo", "xb-", r(DIGITS, 12), "-", r(DIGITS, 13), "-", r(LOWER + DIGITS, 24)),
    ),
    (
        "slack token",
        "incident webhook: {s}",
        _join(
            "https://hooks.",
            "slack.com/services/T",
            r(UPPER + DIGITS, 10),
            "/B",
            r(UPPER + DIGITS, 10),
            "/",
            r(ALNUM, 24),
        ),
    ),
    ("stripe key", "billing uses {s} in production", _join("sk", "_live_", r(ALNUM, 24))),
    ("openai key", "the eval harness reads {s}", _join("sk-", "proj-", r(URLSAFE, 48))),
    (
        "anthropic key",
        "the summariser calls Claude with {s}",
        _join("sk-", "ant-api03-", r(URLSAFE, 93)),
    ),
    ("google api key", "Maps widget key {s}", _join("AI", "za", r(URLSAFE, 35))),
    (
        "google oauth secret",
        "OAuth client for the admin app: {s}",
        _join("GOC", "SPX-", r(URLSAFE, 28)),
    ),
    ("password in url", "connect with postgres://app_rw:{s}@db.internal:5432/app", r(ALNUM, 18)),
    ("private key", "the deploy key:\n{s}", _pem("RSA PRIVATE KEY")),
    ("private key", "bastion ssh key {s}", _pem("OPENSSH PRIVATE KEY")),
    ("json web token", "a service JWT for testing: {s}", _jwt()),
    (
        "azure storage key",
        "DefaultEndpointsProtocol=https;AccountName=acmelogs;AccountKey={s};",
        _AZURE_KEY,
    ),
    (
        "azure sas signature",
        "share link https://acmelogs.blob.core.windows.net/c/x.csv?sv=2024-05-04&sig={s}",
        r(ALNUM, 43) + "%3D",
    ),
    ("npm token", "publish with {s}", _join("np", "m_", r(ALNUM, 36))),
    ("pypi token", "twine upload uses {s}", _join("pypi-", "AgEIcHlwaS5vcmc", r(URLSAFE, 80))),
    (
        "sendgrid key",
        "transactional mail key {s}",
        _join("S", "G.", r(URLSAFE, 22), ".", r(URLSAFE, 43)),
    ),
    ("mailchimp key", "newsletter export with {s}", _join(r(LOWER + DIGITS, 32), "-us", "14")),
    ("twilio key", "SMS sender key {s}", _join("S", "K", r(HEX, 32))),
    ("telegram bot token", "the release bot token {s}", _join(r(DIGITS, 9), ":", r(URLSAFE, 35))),
    (
        "discord bot token",
        "community bot logs in with {s}",
        _join("M", r(ALNUM, 23), ".", r(ALNUM, 6), ".", r(URLSAFE, 27)),
    ),
    ("square oauth secret", "POS integration secret {s}", _join("sq0", "csp-", r(URLSAFE, 43))),
    ("hugging face token", "model pulls use {s}", _join("h", "f_", r(ALNUM, 34))),
    ("digitalocean token", "droplet API token {s}", _join("do", "p_v1_", r(HEX, 64))),
    ("shopify token", "storefront admin token {s}", _join("shp", "at_", r(HEX, 32))),
    ("databricks token", "the notebook job uses {s}", _join("da", "pi", r(HEX, 32))),
    ("vault token", "root login {s} (revoke after setup)", _join("hv", "s.", r(URLSAFE, 90))),
    (
        "age secret key",
        "backups are encrypted to {s}",
        _join("AGE-SECRET-", "KEY-1", r(UPPER + DIGITS, 58)),
    ),
    ("linear key", "the triage script uses {s}", _join("lin", "_api_", r(ALNUM, 40))),
    ("postman key", "collection runner key {s}", _join("PM", "AK-", r(HEX, 24), "-", r(HEX, 34))),
    ("mailgun key", "bounce handler key {s}", _join("ke", "y-", r(HEX, 32))),
    ("new relic key", "APM ingest key {s}", _join("NR", "AK-", r(UPPER + DIGITS, 27))),
    ("bearer token", "curl -H 'Authorization: Bearer {s}' https://api.acme.dev", r(URLSAFE, 40)),
    ("basic auth", "Authorization: Basic {s}", _BASIC),
    ("api key", "the weather api key is {s}", r(HEX, 32)),
    ("token", "DEPLOY_TOKEN={s}", r(ALNUM, 30)),
    ("client secret", "client secret: {s}", r(URLSAFE, 34)),
    ("artifactory token", "artifactory api key {s} for the mirror", _join("AK", "C", r(ALNUM, 70))),
    ("high entropy string", "paste this into the vault later: {s}", r(B64, 44)),
    (
        "discord webhook",
        "release notes are mirrored to https://discord.com/api/webhooks/{n}/{s}".replace(
            "{n}", r(DIGITS, 18)
        ),
        r(URLSAFE, 68),
    ),
    ("password in url", "sidekiq uses redis://:{s}@cache.internal:6379/1", r(ALNUM, 24)),
    ("password", "the initial admin password {s} still works", _join("Maple#", "Kettle", "482")),
    ("password", "Grafana login: admin / {s}", _join("Copper$", "Lake", "719")),
    ("password", "curl -u deploy:{s} https://ci.acme.dev/job/build", r(ALNUM, 14)),
    ("password", "the pw for the build box is {s}", _join("Qx7", "-tulip-", "Ra9")),
    ("atlassian token", "jira-bot uses {s}", _join("ATA", "TT3", r(URLSAFE, 180))),
    ("password", "CREATE USER ro WITH PASSWORD '{s}';", _join("Zq-", "Tm8", "#vLp2x")),
    ("pin", "the door PIN is {s} for the lab", r(DIGITS, 6)),
    ("password", "Passwort für den Build-Server (im Keller): {s} bitte nicht teilen", r(ALNUM, 13)),
    (
        "password",
        "the vpn password is same as last year, it is {s} for everyone",
        _join("Rv#", "2qk", "Lm9"),
    ),
    ("sentry token", "sourcemaps upload with {s}", _join("sn", "tryu_", r(HEX, 64))),
]

NEAR_MISSES: list[str] = [
    "the password policy requires 14 characters and a symbol",
    "the api key is stored in AWS Secrets Manager under prod/billing",
    "the db password is rotated every 90 days by the vault job",
    "the session token expires in 3600 seconds",
    "the secret is that nobody reads the runbook",
    "password: <your password here>",
    "api_key=YOUR_API_KEY",
    "token: ${GITHUB_TOKEN}",
    "export PGPASSWORD=$DB_PASSWORD before running psql",
    "password: ********",
    "the wifi password is on the fridge",
    "set password_min_length = 14 in the policy file",
    "the CSRF token is regenerated per session",
    f"commit {r(HEX, 40)} fixed the flaky test",
    f"reverted {r(HEX, 7)} after the incident",
    "request id 123e4567-e89b-12d3-a456-426614174000 timed out",
    f"memory mem_01J{r(UPPER + DIGITS, 23)} was superseded",
    f"release tarball checksum sha256:{r(HEX, 64)}",
    f"image ghcr.io/acme/api@sha256:{r(HEX, 64)} is in production",
    f"the CDN script has integrity sha384-{r(B64, 64)}",
    "the deploy role is arn:aws:iam::123456789012:role/deploy-bot",
    "backups go to s3://acme-prod-backups/2026/12/",
    "model files live in gs://acme-ml/models/ranker-v3/",
    "clone ssh://git@github.com/acme/api.git for the service",
    "the API docs are at https://api.acme.dev/v2/docs",
    f"the host key fingerprint is SHA256:{r(B64, 43)}",
    "the old fingerprint was 43:51:43:a1:b5:fc:8b:b7:0a:3a:a9:b1:0f:66:73:a8",
    "the AWS example key AKIAIOSFODNN7EXAMPLE is in the docs",
    "the load balancer is at 52.14.1.9 and the db at 10.0.0.12",
    "ask alice@acme.dev for the staging credentials",
    "the token count limit is 4096 for the summariser",
    f"hash of the empty file: {r(HEX, 64)}",
    "the class is AbstractSingletonProxyFactoryBean in the legacy code",
    "the api key is in 1Password, item 'Stripe prod'",
    "v2.14.3 shipped the passkey login",
    "the secret key base is rotated yearly",
    f"AWS returned x-amz-id-2 {r(B64, 76)} for the failed upload",
    "the feature payload is eyJlbmFibGVkIjp0cnVlLCJ2YXJpYW50IjoiYiJ9 (base64 JSON)",
    f"add ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{r(B64, 43)} ci@runner-2 to authorized_keys",
    "the docs show the token as ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "STRIPE_SECRET_KEY=sk_live_XXXXXXXXXXXX in .env.example",
    "connect to postgres://app:${DB_PASSWORD}@db.internal/app from the job",
    "pin numpy to 1.26.4 until the wheels for 2.x land",
    "the api token expires at 2026-06-01T12:00Z, renew it before",
    "secret scanning rule: (?i)(api[_-]?key|secret)[:=][A-Za-z0-9]{16,} catches most",
    "the deploy token is in 1Password, vault Engineering",
]
