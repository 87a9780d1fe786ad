"""Disk footprint per store size: the index's apparent and written bytes, SQLite's, the model
cache's, beside what the memories themselves hold and the RSS of a process serving them.

    python bench/footprint.py 0 10 1000 10000 [--out bench/footprint.json]

One store grows through the bulk import path (``store_many``, the bench corpus) and is measured
closed at each size. "Apparent" is what a copy without sparse support (a backup, a synced
folder, a tmpfs) pays; "written" is what the disk holds (``st_blocks``). "Vectors + payload" is
what ferrex hands the engine, counted at its upserts as the engine stores it: dense float32,
token vectors at 8 bits (dimension + 4 bytes each), sparse pairs at 8 bytes, the payload's JSON.
RSS: a fresh process opens the store and answers one recall (VmRSS, VmHWM).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "src"))
sys.path.insert(0, str(BENCH))

MIB = 1024 * 1024


def sizes_of(path: Path) -> tuple[int, int]:
    """(apparent, written) bytes of the regular files under ``path``."""
    apparent = written = 0
    for root, _, files in os.walk(path):
        for name in files:
            info = os.lstat(os.path.join(root, name))
            apparent += info.st_size
            written += info.st_blocks * 512
    return apparent, written


class Tally:
    """Counts the bytes of the points handed to the index (wraps its ``upsert``)."""

    def __init__(self) -> None:
        self.vectors = 0
        self.payload = 0

    def wrap(self, index: Any) -> None:
        upsert = index.upsert

        def counted(points: Any) -> None:
            for point in points:
                self.vectors += 4 * len(point.dense) + 8 * len(point.sparse.indices)
                if point.tokens is not None:
                    self.vectors += len(point.tokens) * (int(point.tokens.shape[-1]) + 4)
                self.payload += len(json.dumps(point.payload, default=str))
            upsert(points)

        index.upsert = counted


def measure(data: Path, tally: Tally, models: Path) -> dict[str, Any]:
    index_apparent, index_written = sizes_of(data / "index")
    wal_apparent, wal_written = sizes_of(data / "index" / "wal")
    db_apparent, db_written = 0, 0
    for name in ("ferrex.db", "ferrex.db-wal"):
        if (data / name).exists():
            info = (data / name).stat()
            db_apparent += info.st_size
            db_written += info.st_blocks * 512
    models_in_data = sizes_of(data / "models")[1] if (data / "models").exists() else 0
    return {
        "index_apparent_mb": round(index_apparent / MIB, 1),
        "index_written_mb": round(index_written / MIB, 1),
        "wal_apparent_mb": round(wal_apparent / MIB, 1),
        "wal_written_mb": round(wal_written / MIB, 1),
        "sqlite_mb": round(db_written / MIB, 2),
        "vectors_payload_mb": round((tally.vectors + tally.payload) / MIB, 2),
        "models_in_data_dir_mb": round(models_in_data / MIB, 1),
        "model_cache_written_mb": round(sizes_of(models)[1] / MIB, 2),
    }


RSS_CHILD = """
import json, sys
sys.path.insert(0, {src!r}); sys.path.insert(0, {bench!r})
from ferrex.logs import configure
configure("error")
from stores import open_service
from ferrex.server.calls import run_tool
service = open_service({data!r}, "small")
run_tool(service, "recall", {{"query": "what did they say about the trip", "limit": 5}})
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
keys = ("VmRSS", "VmHWM", "RssAnon", "RssFile")
reading = {{k: int(status[k].split()[0]) // 1024 for k in keys}}
for line in open("/proc/self/smaps_rollup"):
    if line.startswith("Pss:"):
        reading["Pss"] = int(line.split()[1]) // 1024
print(json.dumps(reading))
service.close()
"""


def rss(data: Path, env: dict[str, str]) -> dict[str, int]:
    src = os.environ.get("BENCH_SERVED_SRC") or str(BENCH.parent / "src")  # another checkout
    code = RSS_CHILD.format(src=src, bench=str(BENCH), data=str(data))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    reading: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "rss_mb": reading["VmRSS"],
        "peak_rss_mb": reading["VmHWM"],
        "rss_anon_mb": reading["RssAnon"],
        "rss_file_mb": reading["RssFile"],
        "pss_mb": reading["Pss"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("sizes", type=int, nargs="+")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--existing",
        type=Path,
        metavar="STORE",
        help="measure a copy of this bench store (its data dir's parent) instead of building",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ferrex-footprint-"))
    models = work / "models-cache"
    os.environ["XDG_CACHE_HOME"] = str(models)  # the shared model cache, measured apart
    env = {**os.environ, "FERREX_LOG": "error"}
    if args.existing is not None:  # as built (by whichever code built it), then opened
        data = work / "data"
        # A sparse copy: the zero pages of the engine's pre-sized files (which the cache's own
        # copies filled in) become holes again, as the engine leaves them.
        subprocess.run(
            ["cp", "-a", "--sparse=always", str(args.existing / "data"), str(data)], check=True
        )
        built = measure(data, Tally(), models)
        row = {"memories": args.sizes[0], **built, **rss(data, env)}
        print(json.dumps(row), flush=True)
        shutil.rmtree(work, ignore_errors=True)
        return 0
    from corpus import memories
    from ferrex.logs import configure
    from stores import bulk_load, open_service

    configure("error")
    data = work / "data"
    stream = memories(args.seed)
    tally = Tally()
    loaded = 0
    rows = []
    for size in sorted(set(args.sizes)):
        service = open_service(data, "small")
        tally.wrap(service.index)
        try:
            if size > loaded:
                loaded += int(bulk_load(service, size - loaded, stream)["stored"])
        finally:
            service.close()
        row = {"memories": size, **measure(data, tally, models), **rss(data, env)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
