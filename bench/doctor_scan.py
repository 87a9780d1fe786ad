"""``ferrex doctor``'s secret scan, full against incremental, on a copy of a cached store.

    python bench/doctor_scan.py 10000 --add 100
    python bench/doctor_scan.py 100000 --cached ~/.cache/ferrex-bench/store-100000-…-composed-late

Copies the cached store of that size (``bench/stores.py``), opens it as ``ferrex doctor`` does
(the schema migrated on open), then times ``sweep`` (core/secrets/sweep.py, the secret part of
doctor, nothing else of it): a full scan (the first, no record yet), an incremental one with
nothing written since, one after ``--add`` memories stored through ``store_many``, and a
``--full`` one. Prints one JSON line per scan: its kind, the rows it read and the seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "src"))
sys.path.insert(0, str(BENCH))

from ferrex.core.secrets.sweep import sweep  # noqa: E402
from ferrex.core.service import MemoryService  # noqa: E402
from ferrex.server.calls import store_many  # noqa: E402
from stores import cached_store, copy_store, open_service  # noqa: E402


def timed(service: MemoryService, label: str, *, full: bool = False) -> dict[str, Any]:
    start = time.perf_counter()
    report = sweep(service, repair=False, full=full)
    seconds = time.perf_counter() - start
    line = {
        "run": label,
        "scanned": report["scanned"],
        "rows": report["rows_scanned"],
        "holding": report["memories"],
        "seconds": round(seconds, 3),
    }
    print(json.dumps(line), flush=True)
    return line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("size", type=int, help="the cached store's size (bench/stores.py)")
    parser.add_argument("--add", type=int, default=100, help="memories stored between scans")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--tier", default="small")
    parser.add_argument("--cached", type=Path, help="a cached store's directory (composed ones)")
    args = parser.parse_args()
    cached = (
        args.cached.expanduser() if args.cached else cached_store(args.size, args.seed, args.tier)
    )
    with tempfile.TemporaryDirectory(prefix="ferrex-doctor-scan-") as tmp:
        service = open_service(copy_store(cached, Path(tmp)), args.tier)
        try:
            timed(service, "first (no record)")
            timed(service, "incremental, nothing new")
            added = [
                {"content": f"bench note {n}: the nightly job {n} moved to host {n * 13 % 97}"}
                for n in range(args.add)
            ]
            results = store_many(service, added)
            assert all("id" in r for r in results), results[:3]
            timed(service, f"incremental, {args.add} new")
            timed(service, "--full", full=True)
        finally:
            service.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
