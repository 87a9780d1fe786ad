"""Values the spec gives, shared by the tests that check them."""

from __future__ import annotations

SPEC_TOML = """\
[staleness.defaults]
episodic = { fresh = 30, aging = 90, stale = 90 }
semantic = { fresh = 90, aging = 180, stale = 180 }
procedural = { fresh = 180, aging = 365, stale = 365 }

[staleness.namespaces."ci-infra"]
procedural = { fresh = 7, aging = 14, stale = 30 }

[staleness.namespaces."company-reference"]
semantic = { fresh = 365, aging = 730, stale = 730 }
"""

SPEC_DETAILED_KEYS = {
    "counts",
    "staleness",
    "conflicts",
    "entities",
    "storage_mb",
    "recent",
    "needs_attention",
}
