"""Building the dense HNSW index off the request path: a child process optimizes a copy of the
shard, which replaces the live one (``EdgeIndex.swap_in``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from ferrex.store import edge_disk

if TYPE_CHECKING:
    from ferrex.store.edge import EdgeIndex

log = structlog.get_logger("ferrex.index")

# The engine never builds its HNSW index by itself, and optimize() holds the GIL for as long as
# it runs (minutes at 100k points), so ferrex builds it in a CHILD process on a copy of the shard
# and swaps the copy in (see BackgroundOptimizer below).
OPTIMIZE_MIN_UNINDEXED = 20_000  # dense vectors outside an HNSW index before a build starts
OPTIMIZE_CHECK_SECONDS = 30.0


class BackgroundOptimizer:
    """Builds the dense HNSW index off the request path.

    When at least ``min_unindexed`` dense vectors are outside an HNSW graph, the shard's files
    are copied (under the index lock, after a flush: about a second at 100k points) and a child
    process (lowest CPU priority) loads the copy and runs ``optimize()`` there: the engine holds
    ITS GIL for minutes, never ours, so tool calls and protocol pings keep flowing. Updates
    applied meanwhile are recorded, replayed onto the copy, and the copy replaces the live shard
    under the lock (a directory rename; a crash in between leaves the live shard, see
    ``_recover_swap``). ``min_unindexed`` 0 disables it.
    """

    def __init__(self, index: EdgeIndex, min_unindexed: int) -> None:
        self.index = index
        self.min_unindexed = min_unindexed
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._child: subprocess.Popen[bytes] | None = None
        self.builds = 0
        self.last_build_seconds: float | None = None
        self.last_error: str | None = None
        self.building = False

    def status(self) -> dict[str, Any]:
        return {
            "enabled": self.min_unindexed > 0,
            "building": self.building,
            "builds": self.builds,
            "last_build_seconds": self.last_build_seconds,
            "last_error": self.last_error,
        }

    def start(self, check_seconds: float = OPTIMIZE_CHECK_SECONDS) -> None:
        if self.min_unindexed <= 0 or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, args=(check_seconds,), name="ferrex-index", daemon=True
        )
        self._thread.start()

    def _run(self, check_seconds: float) -> None:
        while not self._stop.wait(check_seconds):
            try:
                if self.index.unindexed_vectors() >= self.min_unindexed:
                    self.build()
            except Exception as exc:  # a background thread: one log line, keep serving
                self.last_error = str(exc)[:200]
                log.warning("background index build failed", error=self.last_error)

    def build(self) -> bool:
        """One build, now, in the calling thread (the child does the work). False: cancelled."""
        target = self.index.path.parent / f"{self.index.path.name}.building"
        shutil.rmtree(target, ignore_errors=True)
        started = time.monotonic()
        self.building = True
        try:
            self.index.snapshot_for_build(target)
            # The copy's new segments (the HNSW one) keep their dense vectors mapped from disk,
            # like the token vectors: past this size the store's memory stays flat.
            edge_disk.vectors_mapped(target, ("dense", edge_disk.MAPPED_ALWAYS))
            code = (
                "import os, sys, qdrant_edge as q; os.nice(19); "
                "s = q.EdgeShard.load(sys.argv[1]); s.optimize(); s.flush(); s.close()"
            )
            self._child = subprocess.Popen(
                [sys.executable, "-c", code, str(target)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            _, stderr = self._child.communicate()
            status = self._child.returncode
            self._child = None
            if self._stop.is_set():
                self.index.abandon_build()
                return False
            if status != 0:
                raise RuntimeError(
                    f"index build exited {status}: {stderr.decode(errors='replace')[-200:]}"
                )
            replayed = self.index.swap_in(target)
            self.builds += 1
            self.last_build_seconds = round(time.monotonic() - started, 1)
            self.last_error = None
            log.info(
                "dense HNSW index built in the background",
                seconds=self.last_build_seconds,
                replayed=replayed,
            )
            return True
        except BaseException:
            self.index.abandon_build()
            raise
        finally:
            self.building = False
            shutil.rmtree(target, ignore_errors=True)

    def cancel(self) -> None:
        self._stop.set()
        child = self._child
        if child is not None and child.poll() is None:
            child.kill()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=30)
        self._thread = None


def _old_path(path: Path) -> Path:
    return path.parent / f"{path.name}.replaced"


def _recover_swap(path: Path) -> None:
    """A crash between the two renames of a swap leaves no live shard but the replaced one:
    put it back (the built copy is discarded; the next build starts again)."""
    old = _old_path(path)
    if not path.exists() and old.exists():
        os.rename(old, path)
    shutil.rmtree(path.parent / f"{path.name}.building", ignore_errors=True)
