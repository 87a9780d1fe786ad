"""What looking for credentials costs a store: the scanner's time per memory beside the model's.

    python bench/secrets_cost.py [--repeat 5]

Takes every memory text of assistant-dev (facts as "subject predicate object", procedures as
their steps) and the LoCoMo dev dialogue turns (``../shared/eval``), scans each with the default
scanner (``core/secrets/``: detect-secrets' patterns, ferrex's own, named values, gated
entropy) and embeds each with the bundled all-MiniLM-L6-v2 (the document embedding a store
computes anyway). Prints the median per-text time of both and their ratio, and how many texts
the scanner changed (on these corpora, which hold no credentials: each change would be a false
positive). Writes ``bench/results/secrets-cost-<stamp>.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "src"))

from ferrex.core.secrets.scanner import SecretScanner  # noqa: E402
from ferrex.embed.embedder import FastEmbedEmbedder  # noqa: E402

EVAL = BENCH.parent.parent / "shared" / "eval"


def assistant_texts() -> list[str]:
    data = json.loads((EVAL / "assistant-dev" / "assistant-dev.json").read_text())
    out = []
    for memory in data["memories"]:
        store: dict[str, Any] = memory["store"]
        if "content" in store:
            out.append(str(store["content"]))
        elif "steps" in store:
            out.append(" ".join(store["steps"]))
        else:
            out.append(f"{store.get('subject')} {store.get('predicate')} {store.get('object')}")
    return out


def locomo_texts(limit: int) -> list[str]:
    data = json.loads((EVAL / "locomo-dev" / "locomo-dev.json").read_text())
    found: list[str] = []

    def walk(node: Any) -> None:
        if len(found) >= limit:
            return
        if isinstance(node, dict):
            if isinstance(node.get("text"), str) and isinstance(node.get("speaker"), str):
                found.append(f"{node['speaker']}: {node['text']}")
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(data)
    return found


def per_text(run: Any, texts: list[str], repeat: int) -> float:
    """Median seconds per text over ``repeat`` passes."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for text in texts:
            run(text)
        times.append((time.perf_counter() - start) / len(texts))
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--locomo", type=int, default=2000, help="LoCoMo turns to use")
    args = parser.parse_args()
    scanner = SecretScanner()
    scanner.find("warm the pattern cache: password is Warm1ng!")
    with tempfile.TemporaryDirectory() as models:
        embedder = FastEmbedEmbedder(
            "small", Path(models), offline=True, allow_bundled=True, prefer_bundled=True
        )
        embedder.load()
        report: dict[str, Any] = {"at": datetime.now(UTC).isoformat(), "corpora": {}}
        for name, texts in (
            ("assistant-dev", assistant_texts()),
            ("locomo-dev", locomo_texts(args.locomo)),
        ):
            scan = per_text(scanner.find, texts, args.repeat)
            one = max(1, args.repeat // 2)
            embed = per_text(lambda t: embedder.embed_documents([t]), texts, one)
            changed = sum(bool(scanner.find(t)) for t in texts)
            chars = statistics.mean(len(t) for t in texts)
            report["corpora"][name] = {
                "texts": len(texts),
                "mean_chars": round(chars, 1),
                "scan_ms": round(scan * 1000, 4),
                "embed_ms": round(embed * 1000, 3),
                "scan_over_embed": round(scan / embed, 4),
                "texts_changed": changed,
            }
            print(
                f"{name:14} {len(texts):5} texts ({chars:5.0f} chars): scan {scan * 1000:.3f} ms, "
                f"embed {embed * 1000:.2f} ms, ratio {scan / embed:.3f}; changed {changed}"
            )
    out = BENCH / "results" / f"secrets-cost-{datetime.now(UTC):%Y%m%dT%H%M%S}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
