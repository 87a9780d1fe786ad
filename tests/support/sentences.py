"""Made-up sentences of random words: memories no model has seen, none a duplicate."""

from __future__ import annotations

import random

WORD_TEXT = """
amber anchor apricot arch atlas autumn badger bamboo banner barley basalt beacon birch
biscuit blossom bramble breeze bronze buckle cabin cactus canal canyon cargo cedar chalk
cherry chimney cinder citadel clover cobalt comet copper coral cotton crater crystal
dagger delta desert dolphin dune ember falcon fern ferry fjord flint forge fossil garnet
geyser glacier granite gravel harbor hazel heron hollow indigo iron ivory jasmine
juniper kettle lagoon lantern lava ledger lemon lichen linen lotus magnet maple marble
meadow mesa mirror moss nectar nickel oasis obsidian olive onyx orchard otter oyster
paddle pebble pepper pine plaza quartz quill raven reef ribbon saddle saffron sapphire
satchel shingle silk slate spruce summit tamarind thistle timber topaz tulip tundra
velvet walnut willow
"""
WORDS = WORD_TEXT.split()


def sentence(rng: random.Random, tag: str) -> str:
    words = rng.sample(WORDS, 9)
    return (
        f"Crash log {tag}: the {words[0]} {words[1]} carried {words[2]} past the {words[3]} "
        f"{words[4]} while {words[5]} and {words[6]} waited by the {words[7]} {words[8]}."
    )


# Twenty unrelated findings of a team's assistant, no two near-duplicates (the concurrent
# clients of tests/server/test_http_server.py and tests/runtime/test_engine_sharing.py).
FINDINGS = [
    "the billing cron moved to 02:00 UTC after the March outage",
    "Postgres autovacuum was tuned on the orders table",
    "the iOS app crashes when the camera permission is revoked",
    "Kafka consumer lag alerts page the platform team",
    "the staging cluster runs Kubernetes 1.29",
    "Grafana dashboards live in the observability repository",
    "the search service caches embeddings in Redis for a day",
    "our SLA for the public API is 99.9 percent monthly",
    "Terraform state is stored in an encrypted S3 bucket",
    "the design system uses Tailwind with a custom palette",
    "invoices are generated as PDFs by a Go worker",
    "the mobile release train ships every second Thursday",
    "feature flags are managed with LaunchDarkly",
    "the data warehouse nightly load takes about forty minutes",
    "customer support uses Zendesk macros for refunds",
    "TLS certificates renew automatically through cert-manager",
    "the recommendation model is retrained weekly on Sundays",
    "load tests run with k6 against the pre-production stack",
    "the on-call rotation hands over on Monday mornings",
    "image uploads are resized by a Lambda function",
]
