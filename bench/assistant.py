"""assistant-dev: recall on a mixed-type store (events, facts that get updated, procedures).

    python bench/assistant.py                       # score the defaults, both halves
    python bench/assistant.py --set retrieval.min_score=0 --verbose
    python bench/assistant.py --dump /tmp/features.json   # every candidate's evidence

The protocol is the data set's own (``../shared/eval/assistant-dev/README.md``): an empty store,
one namespace, every memory stored in order through the ``store`` tool at the present clock
(events carry their ``timestamp``), then each question asked with ``limit`` 5 and the defaults
(``as_of`` for the as-of questions). Scored over the 57 answerable questions: P@1 and MRR overall
and per kind, the newer fact first on ``current`` questions (and how often the superseded one
comes back at all), ``as_of`` right; over the 15 unanswerable ones: how many come back empty,
next to how many answerable ones do; the ROC AUC of the top score (answerable against
unanswerable; an empty answer scores 0) and the curve of a threshold on it.

Halves: within each kind, questions alternate between the tuning half (even position) and the
checking half (odd position). Anything fitted on this set is fitted on the tuning half only.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "src"))
sys.path.insert(0, str(BENCH))

DEFAULT_PATH = BENCH.parent.parent / "shared" / "eval" / "assistant-dev" / "assistant-dev.json"
LIMIT = 5
KINDS = ("current", "as_of", "howto", "event", "fact", "unanswerable")


class TickingClock:
    """The present clock of the protocol: the set's ``now``, one second further per store."""

    def __init__(self, start: datetime) -> None:
        self.moment = start

    def __call__(self) -> datetime:
        return self.moment

    def tick(self) -> None:
        self.moment += timedelta(seconds=1)


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def halves(questions: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Question text -> "tune" or "check": alternate within each kind, in the set's order."""
    seen: dict[str, int] = defaultdict(int)
    out = {}
    for question in questions:
        position = seen[question["kind"]]
        seen[question["kind"]] += 1
        out[question["q"]] = "tune" if position % 2 == 0 else "check"
    return out


def open_service(
    data_dir: Path, clock: TickingClock, overrides: Sequence[str], engine: str = "embedded"
) -> Any:
    from ferrex.bootstrap import Options, build_service
    from ferrex.config import load_settings
    from ferrex.logs import configure
    from stores import settings_overrides

    configure("warning")
    cli: dict[str, Any] = {
        "data_dir": str(data_dir),
        "model_tier": "small",
        "offline": True,
        "rerank": False,
        "cache.enabled": False,
    }
    cli.update(dict(settings_overrides(overrides)))
    settings, _ = load_settings(cli=cli, environ={})
    options = Options(explicit_model_tier=True)
    if engine == "qdrant-local":  # the qdrant-client adapter on its local mode (no server here)
        from qdrant_client import QdrantClient

        options = Options(explicit_model_tier=True, qdrant_client=QdrantClient(":memory:"))
    service = build_service(settings, options)
    service.clock = clock
    service.ensure_ready()
    return service


def store_all(service: Any, clock: TickingClock, memories: Sequence[dict[str, Any]]) -> Any:
    """Store each memory through the ``store`` tool in order; key -> id, and the findings."""
    from ferrex.server.calls import run_tool

    ids: dict[str, str] = {}
    findings: list[str] = []
    for memory in memories:
        answer = run_tool(service, "store", dict(memory["store"]))
        clock.tick()
        if "error" in answer:
            findings.append(f"{memory['key']}: refused ({answer['error'].get('code')})")
            continue
        ids[memory["key"]] = answer["id"]
        outcome = answer.get("outcome") or answer.get("status")
        if outcome not in (None, "stored", "created", "superseded"):
            findings.append(f"{memory['key']}: {outcome}")
    return ids, findings


def recall_arguments(question: dict[str, Any], explain: bool, limit: int) -> dict[str, Any]:
    arguments: dict[str, Any] = {"query": question["q"], "limit": limit}
    if question.get("as_of"):
        arguments["as_of"] = question["as_of"]
    if explain:
        arguments["explain"] = True
    return arguments


def ask(service: Any, questions: Sequence[dict[str, Any]], key_of: dict[str, str]) -> list[Any]:
    from ferrex.server.calls import run_tool

    rows = []
    for question in questions:
        answer = run_tool(service, "recall", recall_arguments(question, False, LIMIT))
        results = answer.get("results", [])
        rows.append(
            {
                "q": question["q"],
                "kind": question["kind"],
                "answer": question.get("answer"),
                "superseded": question.get("superseded"),
                "returned": [key_of.get(r["id"], r["id"]) for r in results],
                "scores": [r["score"] for r in results],
                "no_results": answer.get("no_results"),
            }
        )
    return rows


def roc_auc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """P(a random answerable question's top score > an unanswerable one's), ties half."""
    if not positives or not negatives:
        return float("nan")
    wins = 0.0
    for p in positives:
        for n in negatives:
            wins += 1.0 if p > n else 0.5 if p == n else 0.0
    return wins / (len(positives) * len(negatives))


def score_rows(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_kind[row["kind"]].append(row)
    answerable = [r for r in rows if r["kind"] != "unanswerable"]

    def rank(row: dict[str, Any]) -> int | None:
        returned = row["returned"]
        return returned.index(row["answer"]) + 1 if row["answer"] in returned else None

    def p1(group: Sequence[dict[str, Any]]) -> int:
        return sum(1 for r in group if rank(r) == 1)

    def mrr(group: Sequence[dict[str, Any]]) -> float:
        if not group:
            return float("nan")
        return sum(1.0 / (rank(r) or float("inf")) for r in group) / len(group)

    def as_of_right(row: dict[str, Any]) -> bool:
        newer = f"{row['superseded']}_v2"
        returned = row["returned"]
        if rank(row) != 1:
            return False
        return newer not in returned or returned.index(newer) > 0

    unanswerable = by_kind.get("unanswerable", [])
    top = [(r["scores"][0] if r["scores"] else 0.0) for r in answerable]
    top_none = [(r["scores"][0] if r["scores"] else 0.0) for r in unanswerable]
    current = by_kind.get("current", [])
    return {
        "answerable": len(answerable),
        "p_at_1": p1(answerable),
        "mrr": mrr(answerable),
        "per_kind": {
            kind: {"n": len(group), "p_at_1": p1(group), "mrr": mrr(group)}
            for kind, group in sorted(by_kind.items())
            if kind != "unanswerable"
        },
        "current_first": p1(current),
        "superseded_returned": sum(1 for r in current if r["superseded"] in r["returned"]),
        "as_of_right": sum(1 for r in by_kind.get("as_of", []) if as_of_right(r)),
        "as_of_n": len(by_kind.get("as_of", [])),
        "unanswerable": len(unanswerable),
        "unanswerable_empty": sum(1 for r in unanswerable if not r["returned"]),
        "answerable_empty": sum(1 for r in answerable if not r["returned"]),
        "auc": roc_auc(top, top_none),
        "curve": curve(top, top_none),
    }


def curve(positives: Sequence[float], negatives: Sequence[float]) -> list[tuple[float, int, int]]:
    """For thresholds on the top score: (threshold, unanswerable emptied, answerable emptied)."""
    points = sorted({0.0, *positives, *negatives})
    out = []
    for threshold in points:
        out.append(
            (
                threshold,
                sum(1 for n in negatives if n <= threshold),
                sum(1 for p in positives if p <= threshold),
            )
        )
    return out


def report(name: str, scores: dict[str, Any], show_curve: bool) -> Iterator[str]:
    n = scores["answerable"]
    yield (
        f"{name}: P@1 {scores['p_at_1']}/{n} ({scores['p_at_1'] / max(1, n):.3f}), "
        f"MRR {scores['mrr']:.3f}; current first {scores['current_first']}"
        f"/{scores['per_kind'].get('current', {}).get('n', 0)} (superseded returned "
        f"{scores['superseded_returned']}); "
        f"as_of right {scores['as_of_right']}/{scores['as_of_n']}; "
        f"unanswerable empty {scores['unanswerable_empty']}/{scores['unanswerable']}, "
        f"answerable empty {scores['answerable_empty']}; top-score ROC AUC {scores['auc']:.3f}"
    )
    kinds = "  ".join(
        f"{kind} {v['p_at_1']}/{v['n']} (MRR {v['mrr']:.2f})"
        for kind, v in scores["per_kind"].items()
    )
    yield f"    per kind: {kinds}"
    if show_curve:
        rows = [
            f"{t:.3f}: {neg}/{scores['unanswerable']} | {pos}/{n}"
            for t, neg, pos in scores["curve"]
        ]
        yield "    threshold: unanswerable emptied | answerable emptied"
        for start in range(0, len(rows), 6):
            yield "    " + "   ".join(rows[start : start + 6])


def dump_features(
    service: Any, questions: Sequence[dict[str, Any]], key_of: dict[str, str], path: Path
) -> None:
    """Every candidate's evidence (explain) for offline study: limit 30, no floor or gate."""
    from ferrex.server.calls import run_tool

    out = []
    for question in questions:
        answer = run_tool(service, "recall", recall_arguments(question, True, 30))
        out.append(
            {
                **question,
                "candidates": [
                    {
                        "key": key_of.get(r["id"], r["id"]),
                        "type": r["type"],
                        "score": r["score"],
                        "timestamp": r.get("timestamp"),
                        "content": r.get("content"),
                        "explain": r.get("explain"),
                    }
                    for r in answer.get("results", [])
                ],
            }
        )
    path.write_text(json.dumps(out, indent=1), encoding="utf-8")


def run(
    path: Path, overrides: Sequence[str], dump: Path | None, engine: str = "embedded"
) -> dict[str, Any]:
    data = load(path)
    now = datetime.fromisoformat(data["now"]).replace(hour=9, tzinfo=UTC)
    clock = TickingClock(now)
    with tempfile.TemporaryDirectory(prefix="ferrex-assistant-") as tmp:
        service = open_service(Path(tmp), clock, overrides, engine)
        try:
            ids, findings = store_all(service, clock, data["memories"])
            key_of = {v: k for k, v in ids.items()}
            clock.moment = now + timedelta(hours=3)
            if dump is not None:
                dump_features(service, data["questions"], key_of, dump)
            rows = ask(service, data["questions"], key_of)
        finally:
            service.close()
    half = halves(data["questions"])
    return {
        "findings": findings,
        "rows": rows,
        "all": score_rows(rows),
        "tune": score_rows([r for r in rows if half[r["q"]] == "tune"]),
        "check": score_rows([r for r in rows if half[r["q"]] == "check"]),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", nargs="?", type=Path, default=DEFAULT_PATH)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--dump", type=Path, help="write every candidate's evidence here")
    parser.add_argument("--json", type=Path, help="write the scores and rows here")
    parser.add_argument("--verbose", action="store_true", help="each question that missed")
    parser.add_argument("--curve", action="store_true", help="print the top-score curve")
    parser.add_argument(
        "--engine",
        choices=("embedded", "qdrant-local"),
        default="embedded",
        help="the embedded engine, or the qdrant-client adapter in its local mode",
    )
    args = parser.parse_args(argv)
    result = run(args.path, args.set, args.dump, args.engine)
    for finding in result["findings"]:
        print(f"store: {finding}")
    for name in ("all", "tune", "check"):
        for line in report(name, result[name], args.curve and name == "all"):
            print(line)
    if args.verbose:
        for row in result["rows"]:
            first = row["returned"][:1]
            if row["answer"] is None and not row["returned"]:
                continue
            if row["answer"] is not None and first == [row["answer"]]:
                continue
            shown = ", ".join(
                f"{key} {score:.3f}"
                for key, score in zip(row["returned"], row["scores"], strict=True)
            )
            print(f"  [{row['kind']}] {row['q']}\n      want {row['answer']}; got {shown or '-'}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
