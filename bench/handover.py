"""Handover under random timing: MCP clients on one data dir that come and go, and the engine
killed mid-work; counts the calls that failed, the stores lost and the stores doubled.

    python bench/handover.py                       # 20 rounds, 4 clients, seed at random
    python bench/handover.py --rounds 5 --seed 7 --clients 3 --kill 1.0

Each round, on a fresh data dir, starts ``--clients`` real ``ferrex`` servers (MCP SDK stdio
clients, as Claude Desktop and Claude Code windows would) at random moments; each makes a
random number of store + recall pairs with random pauses, then closes its stdin (the client is
done: its ferrex exits, handing the store over when it owns it). In a round drawn with
probability ``--kill``, the process owning the store at a random moment is SIGKILLed instead
(mid-call or not: the timing is random). Afterwards one more client opens the store and every
acknowledged store is checked: in SQLite exactly once with the id it was acknowledged with
(else *lost* or *doubled*) and returned by recall (else *lost*).

*failed*: any call answered with an error, except the calls of the client whose own ferrex was
killed (its agent loses its server; they are counted apart as *own-killed*). *resent*: calls a
ferrex process sent again after its engine went away (its log's "sending it again" lines).
Prints one line per round and the totals; exit status 1 if anything failed, was lost or doubled.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

_WORD_TEXT = """
amber anchor apricot arch atlas autumn badger bamboo banner barley basalt beacon birch biscuit
blossom bramble breeze bronze buckle cabin cactus canal canyon cargo cedar chalk cherry chimney
cinder citadel clover cobalt comet copper coral cotton crater crystal dagger delta desert
dolphin dune ember falcon fern ferry fjord flint forge fossil garnet geyser glacier granite
gravel harbor hazel heron hollow indigo iron ivory jasmine juniper kettle lagoon lantern lava
ledger lemon lichen linen lotus magnet maple marble meadow mesa mirror moss nectar nickel oasis
obsidian olive onyx orchard otter oyster paddle pebble pepper pine plaza quartz quill raven
reef ribbon saddle saffron sapphire satchel shingle silk slate spruce summit tamarind thistle
timber topaz tulip tundra velvet walnut willow
"""
WORDS = _WORD_TEXT.split()


def sentence(rng: random.Random, tag: str) -> str:
    w = rng.sample(WORDS, 9)
    return (
        f"Handover note {tag}: the {w[0]} {w[1]} carried {w[2]} past the {w[3]} {w[4]} "
        f"while {w[5]} and {w[6]} waited by the {w[7]} {w[8]}."
    )


@dataclass
class Round:
    number: int
    data_dir: Path
    rng: random.Random
    acknowledged: list[tuple[str, str]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    own_killed: int = 0
    calls: int = 0
    killed_client: int | None = None  # the client whose own ferrex was SIGKILLed


FERREX: list[str] = []  # --ferrex: another build's command (e.g. before a change)


def ferrex_command() -> str:
    if FERREX:
        return FERREX[0]
    found = shutil.which("ferrex", path=os.path.dirname(sys.executable)) or shutil.which("ferrex")
    if not found:
        raise SystemExit("the ferrex console script is not installed (pip install -e '.[offline]')")
    return found


def params(data_dir: Path, models_dir: Path, log: Path, client: int) -> StdioServerParameters:
    env = {
        "HANDOVER_BENCH_CLIENT": str(client),  # which client a process serves (for the kill)
        "FERREX_HOME": str(data_dir),
        "FERREX_MODELS_DIR": str(models_dir),
        "FERREX_OFFLINE": "1",
        "FERREX_LOG": "info",
        "PATH": os.environ.get("PATH", ""),
    }
    command = [ferrex_command(), "--model-tier", "small"]
    return StdioServerParameters(
        command="/bin/sh", args=["-c", 'exec "$@" 2>>"$0"', str(log), *command], env=env
    )


async def answer_of(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    payload = result.structured_content
    if payload is None:
        payload = json.loads(getattr(result.content[0], "text", "null") or "null")
    if result.is_error and "error" not in payload:
        payload = {"error": payload}
    return dict(payload)


def owner_pid(data_dir: Path) -> int:
    try:
        return int((data_dir / "ferrex.lock").read_text(encoding="utf-8").strip() or 0)
    except (OSError, ValueError):
        return 0


async def client_session(run: Round, models_dir: Path, number: int, log: Path) -> None:
    rng = random.Random(run.rng.random())
    await anyio.sleep(rng.uniform(0.0, 2.5))  # the windows open at random moments
    pairs = rng.randint(3, 12)
    try:
        async with Client(params(run.data_dir, models_dir, log, number)) as client:
            for n in range(pairs):
                text = sentence(rng, f"r{run.number} c{number} n{n}")
                for tool, arguments in (
                    ("store", {"content": text}),
                    ("recall", {"query": text, "limit": 3}),
                ):
                    run.calls += 1
                    try:
                        answer = await answer_of(client, tool, arguments)
                    except Exception as exc:  # the client's own ferrex is gone
                        answer = {"error": {"code": "client", "message": repr(exc)[:200]}}
                    if "error" in answer:
                        if run.killed_client == number:  # its agent lost its own server
                            run.own_killed += 1
                            return
                        run.failed.append(f"c{number} {tool} {n}: {answer['error']}")
                    elif tool == "store":
                        run.acknowledged.append((str(answer["id"]), text))
                await anyio.sleep(rng.uniform(0.0, 0.15))
    except Exception as exc:  # leaving a killed server's session can fail: not a call
        if run.killed_client != number:
            run.failed.append(f"c{number} session: {exc!r}"[:300])


async def killer(run: Round, delay: float) -> None:
    """SIGKILL the process owning the store at ``delay`` (if one does: all may have left)."""
    await anyio.sleep(delay)
    pid = owner_pid(run.data_dir)
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return
    tags = [v.split(b"=", 1)[1] for v in environ if v.startswith(b"HANDOVER_BENCH_CLIENT=")]
    if pid and tags:
        run.killed_client = int(tags[0])
        os.kill(pid, signal.SIGKILL)


async def verify(run: Round, models_dir: Path, log: Path) -> tuple[int, int]:
    """(lost, doubled) among the acknowledged stores."""
    db = run.data_dir / "ferrex.db"
    lost = doubled = 0
    async with Client(params(run.data_dir, models_dir, log, -1)) as client:
        await answer_of(client, "stats", {})
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            for memory_id, text in run.acknowledged:
                ids = [
                    r[0] for r in conn.execute("SELECT id FROM memories WHERE content = ?", (text,))
                ]
                if len(ids) > 1:
                    doubled += 1
                elif ids != [memory_id]:
                    lost += 1
                    continue
                answer = await answer_of(client, "recall", {"query": text, "limit": 5})
                if memory_id not in [r["id"] for r in answer.get("results", [])]:
                    lost += 1
    return lost, doubled


async def one_round(
    number: int, seed: int, clients: int, kill: float, models_dir: Path, logs: Path | None
) -> dict[str, Any]:
    rng = random.Random(seed * 1000 + number)
    with tempfile.TemporaryDirectory(prefix="ferrex-handover-") as tmp:
        run = Round(number, Path(tmp) / "data", rng)
        log = Path(tmp) / "ferrex.log"
        started = time.monotonic()
        killing = rng.random() < kill
        async with anyio.create_task_group() as tasks:
            for n in range(clients):
                tasks.start_soon(client_session, run, models_dir, n, log)
            if killing:
                tasks.start_soon(killer, run, rng.uniform(3.0, 9.0))
        lost, doubled = await verify(run, models_dir, log)
        text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        if logs is not None:
            logs.mkdir(parents=True, exist_ok=True)
            (logs / f"round-{number:02d}.log").write_text(text, encoding="utf-8")
        return {
            "round": number,
            "calls": run.calls,
            "stored": len(run.acknowledged),
            "failed": len(run.failed),
            "lost": lost,
            "doubled": doubled,
            "own_killed": run.own_killed,
            "killed": run.killed_client is not None,
            "resent": text.count("sending it again"),
            "tracebacks": text.count("Traceback"),
            "seconds": round(time.monotonic() - started, 1),
            "failures": run.failed[:3],
        }


async def main_async(args: argparse.Namespace) -> int:
    models_dir = Path(args.models_dir or tempfile.mkdtemp(prefix="ferrex-handover-models-"))
    totals = {"calls": 0, "stored": 0, "failed": 0, "lost": 0, "doubled": 0, "own_killed": 0}
    totals |= {"resent": 0, "kills": 0, "tracebacks": 0}
    for number in range(1, args.rounds + 1):
        logs = Path(args.logs) if args.logs else None
        row = await one_round(number, args.seed, args.clients, args.kill, models_dir, logs)
        for key in (
            "calls",
            "stored",
            "failed",
            "lost",
            "doubled",
            "own_killed",
            "resent",
            "tracebacks",
        ):
            totals[key] += row[key]
        totals["kills"] += int(row["killed"])
        print(
            f"round {number:2d}: {'kill ' if row['killed'] else 'clean'} calls {row['calls']:3d} "
            f"stored {row['stored']:3d} failed {row['failed']} lost {row['lost']} "
            f"doubled {row['doubled']} own-killed {row['own_killed']} resent {row['resent']} "
            f"({row['seconds']} s)",
            flush=True,
        )
        for failure in row["failures"]:
            print(f"    {failure}", flush=True)
    print(
        f"\n{args.rounds} rounds (seed {args.seed}, {args.clients} clients, {totals['kills']} with "
        f"the engine SIGKILLed): calls {totals['calls']}, stores acknowledged {totals['stored']}\n"
        f"failed {totals['failed']} / lost {totals['lost']} / doubled {totals['doubled']}"
        f"   (own-killed {totals['own_killed']}, resent {totals['resent']}, "
        f"tracebacks in logs {totals['tracebacks']})",
        flush=True,
    )
    return 1 if totals["failed"] or totals["lost"] or totals["doubled"] else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--kill", type=float, default=0.5, help="share of rounds with a SIGKILL")
    parser.add_argument("--seed", type=int, default=random.randrange(1 << 30))
    parser.add_argument("--models-dir", default=None, help="reuse a laid-out model directory")
    parser.add_argument("--logs", default=None, help="keep each round's ferrex logs in DIR")
    parser.add_argument("--ferrex", default=None, help="the ferrex command to run (another build)")
    args = parser.parse_args()
    if args.ferrex:
        FERREX.append(args.ferrex)
    return int(anyio.run(main_async, args))


if __name__ == "__main__":
    raise SystemExit(main())
