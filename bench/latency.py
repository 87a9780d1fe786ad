"""Latency of every tool against its floors, at 1k / 10k / 100k memories, in one run.

    python bench/latency.py                       # 1k and 10k (about 15 minutes on 2 cores)
    python bench/latency.py --sizes 1000 10000 100000

Floors, measured in the same run: one query embedding; one raw hybrid engine query (Qdrant Edge
``query_batch``, dense + BM25, the same vectors and filter ferrex sends); raw document-embedding
throughput; one MCP SDK round trip of a trivial tool; the SDK's minimal stdio server from spawn
to its first ``tools/list``. ferrex, per size: recall p50 / p95 / p99 in-process and through a
real MCP stdio client, store p50 / p95, bulk import throughput (``store_many``), ``stats`` brief
and detailed, spawn to first ``tools/list``, RSS; every ratio against its floor.

Stores of realistic text (``bench/corpus.py``) are built once and cached outside the repository
(``bench/stores.py``; ``$FERREX_BENCH_CACHE``, default ``~/.cache/ferrex-bench``): the 100k store
takes about an hour of one core to embed. Each run works on a copy. Writes
``bench/results/latency-<stamp>.json`` and prints the markdown table for ``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(BENCH))

import qdrant_edge as q  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402

from corpus import memories, queries  # noqa: E402
from ferrex.core.service import MemoryService  # noqa: E402
from ferrex.logs import configure  # noqa: E402
from ferrex.server.calls import run_tool as invoke  # noqa: E402
from ferrex.server.calls import store_many  # noqa: E402
from stores import (  # noqa: E402
    build_info,
    cached_stores,
    composed_store,
    copy_store,
    open_service,
)

MINIMAL_SERVER = BENCH / "minimal_server.py"


# --------------------------------------------------------------------------- statistics


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


def summary(samples: list[float]) -> dict[str, float]:
    """Milliseconds: p50 / p95 / p99 / max of seconds samples."""
    return {
        "p50": round(statistics.median(samples) * 1000, 3),
        "p95": round(pct(samples, 0.95) * 1000, 3),
        "p99": round(pct(samples, 0.99) * 1000, 3),
        "max": round(max(samples) * 1000, 3),
        "n": len(samples),
    }


def timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def rss_mb(pid: int) -> float:
    return memory_mb(pid)["rss"]


def memory_mb(pid: int) -> dict[str, float]:
    """A process's memory: resident (VmRSS), of which anonymous (RssAnon: what the kernel cannot
    drop) and mapped files (RssFile: the page cache, dropped under pressure), and its
    proportional share (Pss, shared pages divided among the processes mapping them)."""
    fields = {"VmRSS:": "rss", "RssAnon:": "anon", "RssFile:": "file"}
    out = {name: 0.0 for name in (*fields.values(), "pss")}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name = fields.get(line.split(" ", 1)[0].split("\t", 1)[0])
        if name:
            out[name] = round(int(line.split()[1]) / 1024, 1)
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                out["pss"] = round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return out


def children_of(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry.name))
    return out


# --------------------------------------------------------------------------- MCP helpers


def ferrex_params(
    data_dir: Path, tier: str, extra: dict[str, str] | None = None
) -> StdioServerParameters:
    command = Path(sys.executable).with_name("ferrex")
    env = {
        # The background HNSW build is measured on its own (--hnsw): off for the size table.
        "FERREX_RETRIEVAL__HNSW_BUILD_MIN_UNINDEXED": "0",
        **{k: v for k, v in os.environ.items() if not k.startswith("FERREX_")},
        "FERREX_HOME": str(data_dir),
        "FERREX_OFFLINE": "1",
        "FERREX_LOG": "error",
        "FERREX_CACHE__ENABLED": "false",
        # This checkout's code, whatever is installed (BENCH_SERVED_SRC: another's src).
        "PYTHONPATH": os.environ.get("BENCH_SERVED_SRC") or str(ROOT / "src"),
        **(extra or {}),
    }
    return StdioServerParameters(
        command=str(command), args=["--model-tier", tier, "--no-rerank"], env=env
    )


def minimal_params() -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=[str(MINIMAL_SERVER)])


async def spawn_to_list(params: StdioServerParameters) -> float:
    """Seconds from spawning the server to the answer of its first tools/list."""
    start = time.perf_counter()
    async with Client(params, mode="legacy") as client:
        await client.list_tools()
        elapsed = time.perf_counter() - start
    return elapsed


async def sdk_floor(round_trips: int, spawns: int) -> dict[str, Any]:
    async with Client(minimal_params(), mode="legacy") as client:
        for _ in range(20):
            await client.call_tool("echo", {"text": "warm"})
        samples = []
        for i in range(round_trips):
            start = time.perf_counter()
            await client.call_tool("echo", {"text": f"ping {i}"})
            samples.append(time.perf_counter() - start)
    spawn = [await spawn_to_list(minimal_params()) for _ in range(spawns)]
    return {"round_trip": summary(samples), "spawn_to_list": summary(spawn)}


async def mcp_recall(
    data_dir: Path, tier: str, texts: list[str], spawns: int, service: MemoryService
) -> dict[str, Any]:
    """Recall through a real MCP stdio client, interleaved query by query with its floors (one
    SDK round trip of the minimal server, the query embedding, the raw engine query on the
    in-process copy) and the in-process recall, so the machine's load hits all alike."""
    params = ferrex_params(data_dir, tier)
    spawn = [await spawn_to_list(params) for _ in range(spawns)]
    out: dict[str, Any] = {"spawn_to_list": summary(spawn)}
    shard = service.index.shard  # type: ignore[attr-defined]
    async with (
        Client(params, mode="legacy") as client,
        Client(minimal_params(), mode="legacy") as minimal,
    ):
        start = time.perf_counter()
        await client.call_tool("stats", {})  # waits for the model and the store
        out["first_stats_s"] = round(time.perf_counter() - start, 3)
        for text in texts[:10]:
            await client.call_tool("recall", {"query": text + " warm", "limit": 10})
            await minimal.call_tool("echo", {"text": text})
        samples: dict[str, list[float]] = {
            k: [] for k in ("mcp", "sdk", "in_process", "embed_query", "engine")
        }
        for text in texts:
            start = time.perf_counter()
            result = await client.call_tool("recall", {"query": text, "limit": 10})
            samples["mcp"].append(time.perf_counter() - start)
            if result.is_error:
                raise RuntimeError(f"recall failed: {result.content}")
            start = time.perf_counter()
            await minimal.call_tool("echo", {"text": text})
            samples["sdk"].append(time.perf_counter() - start)
            start = time.perf_counter()
            invoke(service, "recall", {"query": text, "limit": 10})
            samples["in_process"].append(time.perf_counter() - start)
            start = time.perf_counter()
            dense = service.embedder.embed_query(text)
            samples["embed_query"].append(time.perf_counter() - start)
            request = engine_request(service, dense, service.sparse.encode_query(text))
            start = time.perf_counter()
            shard.query_batch(request)
            samples["engine"].append(time.perf_counter() - start)
        out["interleaved"] = {k: summary(v) for k, v in samples.items()}
        out["recall"] = out["interleaved"]["mcp"]
        store_samples = []
        for item in islice(memories(seed=1234, fresh=True), 30):
            start = time.perf_counter()
            await client.call_tool("store", item)
            store_samples.append(time.perf_counter() - start)
        out["store"] = summary(store_samples)
        pids = children_of(os.getpid())
        served = [p for p in pids if "ferrex" in Path(f"/proc/{p}/cmdline").read_text()]
        readings = sorted((memory_mb(pid) for pid in served), key=lambda m: m["rss"])
        out["rss_mb"] = readings[-1]["rss"] if readings else None
        out["memory_mb"] = readings[-1] if readings else None
    return out


# --------------------------------------------------------------------------- floors in-process


def engine_request(service: MemoryService, dense: Any, sparse: Any) -> q.QueryBatchRequest:
    """The raw engine query ferrex's hybrid recall makes (prefetch 45 per channel)."""
    namespace = service.namespace
    flt = q.Filter(
        must=[
            q.FieldCondition("namespace", match=q.MatchValue(namespace)),
            q.IsEmptyCondition("t_invalid"),
        ]
    )
    corpus = q.Filter(must=[q.FieldCondition("namespace", match=q.MatchValue(namespace))])
    return q.QueryBatchRequest(
        [
            q.QueryRequest(
                limit=45,
                query=q.Query.Nearest([float(x) for x in dense], using="dense"),
                filter=flt,
                params=q.SearchParams(hnsw_ef=service.settings.retrieval.hnsw_ef),
                with_payload=["memory_id", "chunk"],
            ),
            q.QueryRequest(
                limit=45,
                query=q.Query.Nearest(
                    q.SparseVector(list(sparse.indices), list(sparse.values)), using="bm25"
                ),
                filter=flt,
                params=q.SearchParams(idf=q.IdfParams(corpus=corpus)),
                with_payload=["memory_id", "chunk"],
            ),
        ]
    )


def in_process(service: MemoryService, texts: list[str], size: int) -> dict[str, Any]:
    embedder = service.embedder
    shard = service.index.shard  # type: ignore[attr-defined]
    for text in texts[:10]:
        invoke(service, "recall", {"query": text + " warm", "limit": 10})
    recall = []
    embed_q = []
    engine = []
    for text in texts:
        start = time.perf_counter()
        invoke(service, "recall", {"query": text, "limit": 10})
        recall.append(time.perf_counter() - start)
        start = time.perf_counter()
        dense = embedder.embed_query(text)
        embed_q.append(time.perf_counter() - start)
        sparse = service.sparse.encode_query(text)
        request = engine_request(service, dense, sparse)
        start = time.perf_counter()
        shard.query_batch(request)
        engine.append(time.perf_counter() - start)
    fresh = list(islice(memories(seed=4321, fresh=True), 120))
    timed(lambda: embedder.embed_documents([fresh[0]["content"]]), 5)  # warm
    docs = []
    stores = []
    for item in fresh[:60]:
        start = time.perf_counter()
        embedder.embed_documents([item["content"], *item.get("entities", [])])
        docs.append(time.perf_counter() - start)
        start = time.perf_counter()
        invoke(service, "store", item)
        stores.append(time.perf_counter() - start)
    # Bulk import beside raw embedding of the same texts, alternated (three rounds of 128).
    stream = memories(seed=99, fresh=True)
    raw_s = bulk_s = naive_s = 0.0
    raw_n = bulk_n = 0
    model = embedder._model  # type: ignore[attr-defined]
    for _ in range(3):
        items = list(islice(stream, 128))
        texts = [m["content"] for m in items]
        start = time.perf_counter()
        embedder.embed_documents(texts)
        raw_s += time.perf_counter() - start
        raw_n += len(texts)
        start = time.perf_counter()
        list(model.embed(texts))
        naive_s += time.perf_counter() - start
        start = time.perf_counter()
        results = store_many(service, items)
        bulk_s += time.perf_counter() - start
        bulk_n += sum(1 for r in results if r.get("status") == "stored")
    throughput = raw_n / raw_s
    naive_throughput = raw_n / naive_s
    bulk_rate = bulk_n / bulk_s
    brief = timed(lambda: invoke(service, "stats", {}), 20)
    detailed = timed(lambda: invoke(service, "stats", {"detailed": True}), 5)
    return {
        "embed_query": summary(embed_q),
        "engine_query": summary(engine),
        "recall": summary(recall),
        "embed_document": summary(docs),
        "store": summary(stores),
        "embed_throughput": round(throughput, 1),
        "bulk_in_run_per_second": round(bulk_rate, 1),
        "embed_throughput_fastembed_default": round(naive_throughput, 1),
        "stats_brief": summary(brief),
        "stats_detailed": summary(detailed),
        "index": service.index.stats().details,
        "vectors_mb": round(size * service.embedder.info.dimension * 4 / 2**20, 1),
    }


def model_rss_mb(tier: str) -> float:
    """RSS of a bare Python process holding only the embedding model (after one embedding), as
    its library loads it: fastembed's ``TextEmbedding`` over the bundled files for the small
    tier, not ferrex's loader (whose own memory savings would lower the floor too)."""
    code = (
        "import sys, pathlib; sys.path.insert(0, sys.argv[1]);"
        "from ferrex.embed.models import BUNDLED_MODEL, prepare_bundled_model;"
        "from ferrex.embed.embedder import FastEmbedEmbedder;"
        "from fastembed import TextEmbedding;"
        "d = pathlib.Path(sys.argv[2]);"
        "e = (TextEmbedding(BUNDLED_MODEL, specific_model_path=str(prepare_bundled_model(d)))"
        " if sys.argv[3] == 'small' else FastEmbedEmbedder(sys.argv[3], d, offline=True,"
        " allow_bundled=True, prefer_bundled=True));"
        "getattr(e, 'load', lambda: None)();"
        "list(getattr(e, 'embed_documents', e.embed)(['warm up the model once']));"
        "print([l for l in open('/proc/self/status') if l.startswith('VmRSS')][0].split()[1])"
    )
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [sys.executable, "-c", code, str(ROOT / "src"), tmp, tier],
            capture_output=True,
            text=True,
            check=True,
        )
    return int(out.stdout.strip().splitlines()[-1]) / 1024


# --------------------------------------------------------------------------- one size


def run_size(
    size: int, cached: Path, tier: str, texts: list[str], mcp_texts: list[str], spawns: int
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ferrex-bench-") as tmp:
        mine = copy_store(cached, Path(tmp) / "in-process")
        served = copy_store(cached, Path(tmp) / "served")
        service = open_service(mine, tier)
        try:
            row = in_process(service, texts, size)
            row["mcp"] = asyncio.run(mcp_recall(served, tier, mcp_texts, spawns, service))
        finally:
            service.close()
    row["size"] = size
    row["bulk_import"] = build_info(cached)
    return row


# --------------------------------------------------------------------------- HNSW phase


async def timed_recalls(client: Client, texts: list[str]) -> list[float]:
    out = []
    for text in texts:
        start = time.perf_counter()
        await client.call_tool("recall", {"query": text, "limit": 10})
        out.append(time.perf_counter() - start)
    return out


async def background_index(
    cached: Path, tier: str, texts: list[str], check_seconds: float, timeout: float
) -> dict[str, Any]:
    """At the largest size: recall before the HNSW index exists, the longest stall any call saw
    while the background build ran (recalls and pings back to back), and recall after it. Each
    phase asks its own questions: a question asked again would find its embedding and its hits'
    neighbour lookups kept from the phase before."""
    asked = set(texts)
    rest = [t for t in dict.fromkeys(queries(100_000, seed=31)) if t not in asked]
    after_texts, during_texts = rest[: len(texts)], rest[len(texts) :]
    with tempfile.TemporaryDirectory(prefix="ferrex-hnsw-") as tmp:
        data = copy_store(cached, Path(tmp))
        extra = {"FERREX_RETRIEVAL__HNSW_BUILD_MIN_UNINDEXED": "20000"}
        params = ferrex_params(data, tier, extra)
        out: dict[str, Any] = {}
        async with Client(params, mode="legacy") as client:
            detailed = await client.call_tool("stats", {"detailed": True})
            out["index_before"] = (detailed.structured_content or {}).get("index")
            building = data / "index.building"
            started = time.perf_counter()
            before = await timed_recalls(client, texts)
            out["recall_before"] = summary(before)
            # The build starts within one check interval of start-up: record every call until
            # the swap is done (the copy gone and a build counted).
            stalls: list[float] = []
            pings: list[float] = []
            saw_build = False
            i = 0
            while time.perf_counter() - started < timeout:
                text = during_texts[i % len(during_texts)]
                i += 1
                start = time.perf_counter()
                await client.call_tool("recall", {"query": text, "limit": 10})
                stalls.append(time.perf_counter() - start)
                start = time.perf_counter()
                await client.send_ping()
                pings.append(time.perf_counter() - start)
                if building.exists():
                    saw_build = True
                elif saw_build or i % 20 == 0:
                    answer = await client.call_tool("stats", {"detailed": True})
                    index = (answer.structured_content or {}).get("index", {})
                    if (index.get("background_index") or {}).get("builds", 0) >= 1:
                        out["index_after"] = index
                        break
            out["build_seconds_total"] = round(time.perf_counter() - started, 1)
            out["during_build"] = {
                "recall": summary(stalls) if stalls else None,
                "ping": summary(pings) if pings else None,
                "longest_stall_ms": round(max(stalls + pings) * 1000, 1) if stalls else None,
            }
            after = await timed_recalls(client, after_texts)
            out["recall_after"] = summary(after)
            served = [
                p
                for p in children_of(os.getpid())
                if "ferrex" in Path(f"/proc/{p}/cmdline").read_text()
            ]
            out["memory_after_mb"] = [memory_mb(pid) for pid in served]
    return out


# --------------------------------------------------------------------------- table


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}×" if b else "n/a"


def table(floors: dict[str, Any], rows: list[dict[str, Any]], model_mb: float) -> str:
    sdk_rt = floors["round_trip"]["p50"]
    sdk_spawn = floors["spawn_to_list"]["p50"]
    lines = [
        f"Floors: SDK trivial round trip p50 {sdk_rt:.2f} ms; SDK minimal server spawn → first "
        f"tools/list p50 {sdk_spawn:.0f} ms; model alone RSS {model_mb:.0f} MB.",
        "",
        "| memories | embed q p50 | engine q p50 | recall p50 / p95 / p99 | ÷ (embed+engine) "
        "| MCP recall p50 / p95 / p99 | ÷ (embed+engine+SDK) | store p50 / p95 | ÷ its embedding "
        "| bulk import/s | ÷ raw embed/s | stats brief / detailed | spawn→list | ÷ SDK | RSS "
        "| ÷ (vectors+model) |",
        "|" + "---|" * 17,
    ]
    for row in rows:
        eq = row["embed_query"]["p50"]
        en = row["engine_query"]["p50"]
        rc = row["recall"]
        mc = row["mcp"]["recall"]
        inter = row["mcp"]["interleaved"]
        mcp_floor = inter["embed_query"]["p50"] + inter["engine"]["p50"] + inter["sdk"]["p50"]
        st = row["store"]
        doc = row["embed_document"]["p50"]
        bulk = row.get("bulk_in_run_per_second") or row["bulk_import"]["per_second"]
        raw = row["embed_throughput"]
        rss = row["mcp"]["rss_mb"] or 0.0
        floor_rss = row["vectors_mb"] + model_mb
        spawn = row["mcp"]["spawn_to_list"]["p50"]
        lines.append(
            f"| {row['size']:,} | {eq:.2f} ms | {en:.2f} ms "
            f"| {rc['p50']:.1f} / {rc['p95']:.1f} / {rc['p99']:.1f} ms "
            f"| {ratio(rc['p50'], eq + en)} "
            f"| {mc['p50']:.1f} / {mc['p95']:.1f} / {mc['p99']:.1f} ms "
            f"| {ratio(mc['p50'], mcp_floor)} "
            f"| {st['p50']:.1f} / {st['p95']:.1f} ms | {ratio(st['p50'], doc)} "
            f"| {bulk:.0f} | {bulk / raw:.2f}× "
            f"| {row['stats_brief']['p50']:.1f} / {row['stats_detailed']['p50']:.0f} ms "
            f"| {spawn:.0f} ms | {ratio(spawn, sdk_spawn)} "
            f"| {rss:.0f} MB | {ratio(rss, floor_rss)} |"
        )
    lines += [
        "",
        "MCP path, interleaved query by query (p50 ms): ferrex recall through a real stdio client, "
        "one SDK round trip of the minimal server, ferrex in-process, the query embedding, the "
        "raw engine query.",
        "",
        "| memories | MCP recall | SDK trip | in-process | embed q | engine q "
        "| MCP − in-process | MCP ÷ (embed+engine+SDK) | in-process ÷ (embed+engine) |",
        "|" + "---|" * 9,
    ]
    for row in rows:
        i = row["mcp"]["interleaved"]
        p = {k: v["p50"] for k, v in i.items()}
        lines.append(
            f"| {row['size']:,} | {p['mcp']:.2f} | {p['sdk']:.2f} | {p['in_process']:.2f} "
            f"| {p['embed_query']:.2f} | {p['engine']:.2f} | {p['mcp'] - p['in_process']:.2f} "
            f"| {ratio(p['mcp'], p['embed_query'] + p['engine'] + p['sdk'])} "
            f"| {ratio(p['in_process'], p['embed_query'] + p['engine'])} |"
        )
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        lines.append("")
        lines.append(
            f"recall p95 at {last['size']:,} ÷ p95 at {first['size']:,}: in-process "
            f"{ratio(last['recall']['p95'], first['recall']['p95'])}, MCP "
            f"{ratio(last['mcp']['recall']['p95'], first['mcp']['recall']['p95'])}"
        )
    return "\n".join(lines)


def hnsw_table(size: int, h: dict[str, Any]) -> str:
    b, a, d = h["recall_before"], h["recall_after"], h["during_build"]
    lines = [
        f"Background HNSW build at {size:,} memories (MCP recall, p50 / p95 / p99 ms):",
        "",
        "| phase | recall p50 / p95 / p99 | longest call |",
        "|---|---|---|",
        f"| before (brute force) | {b['p50']:.1f} / {b['p95']:.1f} / {b['p99']:.1f} "
        f"| {b['max']:.0f} ms |",
    ]
    if d["recall"]:
        r = d["recall"]
        lines.append(
            f"| during the build ({r['n']} recalls + pings) | {r['p50']:.1f} / {r['p95']:.1f} / "
            f"{r['p99']:.1f} | {d['longest_stall_ms']:.0f} ms |"
        )
    lines.append(
        f"| after (HNSW) | {a['p50']:.1f} / {a['p95']:.1f} / {a['p99']:.1f} | {a['max']:.0f} ms |"
    )
    after = h.get("index_after") or {}
    build = after.get("background_index") or {}
    lines.append("")
    lines.append(
        f"Build: {build.get('last_build_seconds')} s in the child process "
        f"(start-up to swap {h['build_seconds_total']} s)."
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--mcp-queries", type=int, default=200)
    parser.add_argument("--spawns", type=int, default=3)
    parser.add_argument("--model-tier", default="small")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--label", default="")
    parser.add_argument(
        "--hnsw",
        action="store_true",
        help="at the largest size, also measure recall before / during / after the background "
        "HNSW build (stalls included)",
    )
    parser.add_argument("--hnsw-timeout", type=float, default=1800.0)
    parser.add_argument(
        "--only-composed", action="store_true", help="measure the composed store alone"
    )
    parser.add_argument(
        "--composed",
        type=int,
        default=0,
        metavar="N",
        help="add an N-memory store grown from the largest size with composed vectors "
        "(bench/stores.py)",
    )
    args = parser.parse_args()
    configure("error")
    started = time.perf_counter()
    cached = cached_stores(args.sizes, args.seed, args.model_tier)
    if args.composed:
        cached[args.composed] = composed_store(
            args.composed, cached[max(args.sizes)], args.seed, args.model_tier
        )
        args.sizes = [args.composed] if args.only_composed else [*args.sizes, args.composed]
    texts = queries(args.queries)
    mcp_texts = queries(args.mcp_queries, seed=12)
    floors = asyncio.run(sdk_floor(200, args.spawns))
    model_mb = model_rss_mb(args.model_tier)
    rows = []
    for size in sorted(args.sizes):
        rows.append(run_size(size, cached[size], args.model_tier, texts, mcp_texts, args.spawns))
        print(f"  {size} done ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    rendered = table(floors, rows, model_mb)
    hnsw = None
    if args.hnsw:
        largest = max(args.sizes)
        hnsw = asyncio.run(
            background_index(cached[largest], args.model_tier, mcp_texts, 30, args.hnsw_timeout)
        )
        rendered += "\n\n" + hnsw_table(largest, hnsw)
    print(rendered)
    out_dir = BENCH / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    payload = {
        "date": stamp,
        "commit": commit,
        "label": args.label,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average": os.getloadavg(),
        },
        "model_tier": args.model_tier,
        "floors": floors,
        "model_rss_mb": model_mb,
        "rows": rows,
        "hnsw": hnsw,
        "table": rendered,
        "seconds": round(time.perf_counter() - started, 1),
    }
    path = out_dir / f"latency-{stamp}{'-' + args.label if args.label else ''}.json"
    path.write_text(json.dumps(payload, indent=2), encoding="utf-8")
    print(f"wrote {path.relative_to(ROOT)} ({payload['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
