"""Shared test vocabulary: distinct subsystem names that never near-duplicate each other."""

SUBSYSTEMS = [
    "payment ledger",
    "search indexer",
    "email relay",
    "image resizer",
    "audit trail",
    "session store",
    "feature flags",
    "billing exporter",
    "geo lookup",
    "rate limiter",
]
