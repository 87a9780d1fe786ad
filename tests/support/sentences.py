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
