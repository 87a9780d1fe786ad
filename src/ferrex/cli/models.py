"""``ferrex models list`` and ``ferrex models pull``: which models there are, which are in the
cache, which one the store is pinned to, and downloading them ahead of time."""

from __future__ import annotations

import json
import sqlite3
import sys
from dataclasses import asdict, dataclass
from typing import Any

from ferrex.config import Settings
from ferrex.embed.models import (
    BUNDLED_MODEL,
    BUNDLED_VARIANT,
    EMBEDDING_TIERS,
    RERANKER_TIERS,
    bundled_model_available,
    download,
    fastembed_description,
    hub_reachable,
    is_cached,
    prepare_bundled_model,
)


@dataclass
class ModelRow:
    kind: str  # "embedding" | "reranker"
    tier: str
    model: str
    dimension: int | None
    size_mb: int | None
    cached: bool
    bundled: bool  # available from the offline extra without any download
    configured: bool
    pinned: bool


def store_pin(settings: Settings) -> dict[str, str]:
    """The embedding model the store is pinned to (read-only; safe while a server runs)."""
    if not settings.db_path.exists():
        return {}
    try:
        connection = sqlite3.connect(f"file:{settings.db_path}?mode=ro", uri=True, timeout=5)
        try:
            rows = connection.execute(
                "SELECT key, value FROM meta WHERE key IN "
                "('embedding_model', 'embedding_dimension', 'embedding_variant')"
            ).fetchall()
        finally:
            connection.close()
    except sqlite3.Error:
        return {}
    return {str(key): str(value) for key, value in rows}


def _size_mb(model: str, *, reranker: bool) -> int | None:
    found = fastembed_description(model, reranker=reranker)
    if found is None:
        return None
    return round(float(found[1].size_in_GB) * 1000)


def model_rows(settings: Settings) -> list[ModelRow]:
    pin = store_pin(settings)
    pinned = pin.get("embedding_model", "").lower()
    cache = settings.model_cache
    bundled = bundled_model_available()
    rows = []
    for tier in EMBEDDING_TIERS.values():
        rows.append(
            ModelRow(
                kind="embedding",
                tier=tier.tier,
                model=tier.model,
                dimension=tier.dimension,
                size_mb=_size_mb(tier.model, reranker=False),
                cached=is_cached(tier.model, cache),
                bundled=bundled and tier.model.lower() == BUNDLED_MODEL.lower(),
                configured=tier.tier == settings.model_tier,
                pinned=tier.model.lower() == pinned,
            )
        )
    for name, model in RERANKER_TIERS.items():
        rows.append(
            ModelRow(
                kind="reranker",
                tier=name,
                model=model,
                dimension=None,
                size_mb=_size_mb(model, reranker=True),
                cached=is_cached(model, cache, reranker=True),
                bundled=False,
                configured=settings.rerank and name == settings.reranker_tier,
                pinned=False,
            )
        )
    return rows


def render_rows(rows: list[ModelRow], settings: Settings) -> str:
    pin = store_pin(settings)
    header = ("", "kind", "tier", "model", "dim", "size", "available")
    table: list[tuple[str, ...]] = [header]
    for row in rows:
        marks = ("*" if row.configured else " ") + ("P" if row.pinned else " ")
        where = (
            "cached"
            if row.cached
            else "bundled (offline extra)"
            if row.bundled
            else "not downloaded"
        )
        table.append(
            (
                marks,
                row.kind,
                row.tier,
                row.model,
                str(row.dimension or ""),
                f"{row.size_mb} MB" if row.size_mb is not None else "?",
                where,
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in table
    ]
    lines.append("")
    lines.append(f"* configured   P the store is pinned to it   cache: {settings.model_cache}")
    if pin.get("embedding_model"):
        variant = pin.get("embedding_variant") or "fastembed"
        if variant == BUNDLED_VARIANT:
            variant = "bundled int8 copy"
        lines.append(
            f"store {settings.db_path.parent}: pinned to {pin['embedding_model']} "
            f"({pin.get('embedding_dimension', '?')}-d, {variant})"
        )
    else:
        lines.append("the store is not pinned yet (its first write pins the model it runs with)")
    if not settings.rerank:
        lines.append("reranking is disabled (--no-rerank / rerank = false)")
    return "\n".join(lines) + "\n"


def list_models(settings: Settings, *, as_json: bool) -> int:
    rows = model_rows(settings)
    if as_json:
        payload: dict[str, Any] = {
            "models": [asdict(row) for row in rows],
            "cache": str(settings.model_cache),
            "pinned": store_pin(settings) or None,
        }
        sys.stdout.write(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(render_rows(rows, settings))
    return 0


def pull_command(tier: str | None = None, reranker: str | None = None) -> str:
    """The exact command that fetches a model (what error messages tell people to run)."""
    parts = ["ferrex models pull"]
    if tier:
        parts.append(f"--tier {tier}")
    if reranker:
        parts.append(f"--reranker {reranker}")
    return " ".join(parts)


def pull(settings: Settings, tier: str | None, reranker: str | None) -> int:
    """Download the asked-for models (default: the configured embedding model and reranker)."""
    wanted: list[tuple[str, str, bool]] = []  # (label, model, is_reranker)
    if tier is None and reranker is None:
        tier = settings.model_tier
        reranker = settings.reranker_tier if settings.rerank else None
    if tier is not None:
        wanted.append((f"--tier {tier}", EMBEDDING_TIERS[tier].model, False))
    if reranker is not None:
        wanted.append((f"--reranker {reranker}", RERANKER_TIERS[reranker], True))
    failed = 0
    online: bool | None = None
    for label, model, is_reranker in wanted:
        what = "reranker" if is_reranker else "embedding model"
        if is_cached(model, settings.model_cache, reranker=is_reranker):
            sys.stderr.write(f"{what} {model} is already in the cache ({settings.model_cache})\n")
            continue
        if online is None:
            online = not settings.offline and hub_reachable()
        if not online:
            if (
                not is_reranker
                and model.lower() == BUNDLED_MODEL.lower()
                and (bundled_model_available())
            ):
                directory = prepare_bundled_model(settings.model_cache)
                sys.stderr.write(
                    f"the model hub cannot be reached; {model} is available from the offline "
                    f"extra (int8 copy, laid out in {directory}): ferrex uses it with "
                    f"--model-tier {tier or 'small'}\n"
                )
                continue
            reason = (
                "offline mode is on"
                if settings.offline
                else ("the model hub (huggingface.co) cannot be reached")
            )
            sys.stderr.write(
                f"error: cannot download the {what} {model}: {reason}. Connect to the "
                f"internet and run `ferrex models pull {label}` again, or copy the model "
                "files from a connected machine and pass "
                + ("--reranker-path DIR" if is_reranker else "--model-path DIR")
                + "\n"
            )
            failed += 1
            continue
        sys.stderr.write(f"downloading the {what} {model} into {settings.model_cache}\n")
        try:
            download(model, settings.model_cache, reranker=is_reranker)
        except Exception as exc:
            sys.stderr.write(
                f"error: downloading {model} failed ({str(exc)[:200]}); run "
                f"`ferrex models pull {label}` again\n"
            )
            failed += 1
            continue
        sys.stderr.write(f"{what} {model} is ready\n")
    return 1 if failed else 0
