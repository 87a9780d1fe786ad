"""The embedded engine's files and the disk under them: the engine never touches a page the disk
cannot hold.

The engine (qdrant-edge) keeps its data in memory-mapped files it pre-sizes and leaves sparse:
chunks for each dense and token vector storage (32 MiB by default; 4 MiB as ferrex sets them,
``CHUNK_BYTES``), 32 MiB pages for the payload and the sparse vectors, 2-4 MiB pages and 1 MiB
flag files for every payload index, and its write-ahead log's segments. Touching a page of a
hole the file system cannot back (a full disk, a full tmpfs) is a SIGBUS: the process dies,
whatever Python does. So ferrex CHECKS the free space against every page the engine may still
touch — the holes of its files (``unbacked_bytes``), plus what one write may add to them
(``GROWTH_BYTES``) — before the engine opens the shard and before every engine write, and
answers ``StorageSpaceError`` (``storage_full``, naming the space needed) instead. It does not
reserve the holes (``posix_fallocate`` would): the files stay sparse, so a small store takes
little disk where the file system has sparse files (ext4: about 1 MB for 10 memories, not the
files' 156 MB).

What remains (the race): the check and the engine's page touches are separate moments. Another
program filling the disk while an engine write runs (after the check, before its pages are
written) can still end in SIGBUS; so can a read that faults a never-written page on a tmpfs
filled meanwhile (reads of a hole allocate there, not on ext4).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import qdrant_edge as q

from ferrex.core.errors import StorageSpaceError

MIB = 1024 * 1024
# The write-ahead log's segment size (the engine's default is 32 MiB, two segments open): set
# through the engine's persisted config (``edge_config.json`` "wal_options", which its load
# reads, "provided -> persisted -> default"); the Python API has no parameter for it.
WAL_SEGMENT_BYTES = 2 * MIB
_WAL_OPTIONS = {"segment_capacity": WAL_SEGMENT_BYTES, "segment_queue_len": 0, "retain_closed": 1}
# The most one engine write adds to the files' pages, besides their holes: a new 32 MiB payload
# page, vector chunks and a WAL segment, with room to spare.
GROWTH_BYTES = 40 * MIB
# SQLite's own files at open (its -wal and -shm) and a little room for the first writes.
OPEN_MARGIN_BYTES = 4 * MIB
# The files of a new, empty ferrex shard (apparent size; qdrant-edge-py 0.9.0: 144.5 MiB with
# the payload indexes, the vector chunks come with the first write): what creating one needs
# free, since the engine touches its pages as it creates them (on a tmpfs, all of them).
FRESH_SHARD_BYTES = 150 * MIB
# The vector storages' chunk size (the engine's default: 32 MiB, one chunk file at the first
# vector, populated in RAM). Each storage keeps the chunk size in its own ``config.json``,
# written when the storage is created and read back at every load; ferrex rewrites it while
# the storage holds no chunk yet (a new shard, or the empty segment a build leaves): 4 MiB is
# 2,730 dense vectors (384-d float32) or 10,810 token vectors a chunk.
CHUNK_BYTES = 4 * MIB
_CONFIG = "edge_config.json"
# The token vectors (the late-interaction channel) are always mapped from disk, not read in: a
# recall reads those of ~30-100 candidates, never the whole storage; the dense ones are mapped
# once the store has its HNSW graph (store/edge_build.py), below that every write's duplicate
# check scans them all.
MAPPED_ALWAYS = "tokens"


def free_bytes(path: Path) -> int | None:
    """Free space (for this user) on the file system holding ``path`` or its nearest parent."""
    for candidate in (path, *path.parents):
        try:
            return shutil.disk_usage(candidate).free
        except OSError:
            continue
    return None


def _sizes(path: Path) -> Iterator[tuple[str, int, int]]:
    """(file, apparent size, bytes on disk) of every regular file under ``path`` (os.scandir:
    ~1 ms for a fresh shard's 150 files, where ``Path.rglob`` takes 3)."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                yield from _sizes(Path(entry.path))
            elif entry.is_file(follow_symlinks=False):
                info = entry.stat(follow_symlinks=False)
                yield entry.path, info.st_size, info.st_blocks * 512
        except OSError:
            continue


def unbacked_bytes(path: Path) -> int:
    """Bytes of the shard's files that no disk block backs yet (their holes)."""
    return sum(max(0, size - used) for _, size, used in _sizes(path))


def written_bytes(path: Path) -> int:
    """What the shard's files occupy on disk."""
    return sum(used for _, _, used in _sizes(path))


def apparent_bytes(path: Path) -> int:
    """The size of the shard's files as a copy without sparse support pays it."""
    return sum(size for _, size, _ in _sizes(path))


def require_backing(path: Path, what: str, extra: int = 0) -> None:
    """``StorageSpaceError`` unless the disk holding the shard has room for every page of its
    files not written yet, and ``extra`` bytes more."""
    require_free(path, unbacked_bytes(path) + extra, what)


def require_free(path: Path, needed: int, what: str) -> None:
    """``StorageSpaceError`` unless the disk holding ``path`` has ``needed`` bytes free."""
    free = free_bytes(path)
    if free is not None and free < needed:
        raise StorageSpaceError(needed, free, what)


def small_wal(path: Path) -> None:
    """Record the small WAL segments in the shard's persisted config (read at the next load;
    an existing shard's segments take the new size as they rotate)."""
    config_path = path / _CONFIG
    try:
        data = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(data, dict) or data.get("wal_options") == _WAL_OPTIONS:
        return
    data["wal_options"] = _WAL_OPTIONS
    _write_json(config_path, data)


def small_chunks(path: Path) -> int:
    """Give every vector storage of the shard that has no chunk yet ``CHUNK_BYTES`` chunks
    (the shard closed: the engine reads the size when it opens the storage); how many."""
    changed = 0
    for config_path in (path / "segments").glob("*/vector_storage-*/*/config.json"):
        if any(config_path.parent.glob("chunk_*")):
            continue  # holds vectors: its chunks keep their size
        try:
            data = json.loads(config_path.read_text(encoding="utf-8"))
            element = int(data["chunk_size_bytes"]) // int(data["chunk_size_vectors"])
        except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
            continue  # not a chunked vector storage (or a format this code does not know)
        vectors = max(1, CHUNK_BYTES // element)
        if data["chunk_size_vectors"] == vectors:
            continue
        data.update(chunk_size_vectors=vectors, chunk_size_bytes=vectors * element)
        changed += _write_json(config_path, data)
    return changed


def vectors_mapped(path: Path, names: Iterable[str]) -> int:
    """Keep the named vector storages of the shard mapped from disk, not read into memory
    (the shard closed); how many segment storages changed.

    The engine reads a ``Cached`` storage (its default) into the page cache when it opens it and
    keeps it resident; a ``Cold`` one is mapped and paged in as searches touch it. The persisted
    config (``edge_config.json``) gets ``"memory": "cold"`` for each name (the segments the
    engine makes from now on, a build's included), and each existing segment's storage type
    (``segment.json``) its mapped twin: the same files, opened without reading them in."""
    names = set(names)
    changed = _edit_json(path / _CONFIG, lambda data: _cold_vectors(data, names))
    for segment in (path / "segments").glob("*/segment.json"):
        changed += _edit_json(segment, lambda data: _mapped_storage(data, names))
    return changed


def config_vectors(path: Path) -> dict[str, Any]:
    """The shard's vectors by name, as its persisted config has them (the engine's own file,
    written at creation and again on every load); empty without one."""
    try:
        data = json.loads((path / _CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    vectors = data.get("vectors") if isinstance(data, dict) else None
    return vectors if isinstance(vectors, dict) else {}


def mapped_vectors(path: Path) -> set[str]:
    """The vector names the shard's persisted config keeps mapped (``vectors_mapped``)."""
    return {
        name
        for name, params in config_vectors(path).items()
        if isinstance(params, dict) and params.get("memory") == "cold"
    }


# A segment's vector storage type read into memory at open -> the same files mapped (the
# engine's VectorStorageType; Memory.Cold makes the mapped ones for new segments).
_MAPPED_TWIN = {"InRamMmap": "Mmap", "InRamChunkedMmap": "ChunkedMmap"}


def _cold_vectors(data: Any, names: set[str]) -> bool:
    vectors = data.get("vectors") if isinstance(data, dict) else None
    changed = False
    for name in names:
        params = vectors.get(name) if isinstance(vectors, dict) else None
        if isinstance(params, dict) and params.get("memory") != "cold":
            params["memory"] = "cold"
            params.pop("on_disk", None)  # the deprecated flag, which "memory" overrides
            changed = True
    return changed


def _mapped_storage(data: Any, names: set[str]) -> bool:
    config = data.get("config") if isinstance(data, dict) else None
    vectors = config.get("vector_data") if isinstance(config, dict) else None
    changed = False
    for name in names:
        params = vectors.get(name) if isinstance(vectors, dict) else None
        kind = params.get("storage_type") if isinstance(params, dict) else None
        if isinstance(kind, str) and kind in _MAPPED_TWIN:
            params["storage_type"] = _MAPPED_TWIN[kind]  # type: ignore[index]
            changed = True
    return changed


def _edit_json(path: Path, edit: Callable[[Any], bool]) -> int:
    """Apply ``edit`` to a JSON file, rewritten atomically when it changed it; 1 if so."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
    if not edit(data):
        return 0
    return _write_json(path, data)


def _write_json(path: Path, data: Any) -> int:
    """Replace one of the engine's JSON files, durably: the new text written and synced
    beside it, renamed over it, the directory synced (a crash leaves the old file or the new,
    never an empty one). 1 when written; 0 when the disk refused (a full disk: the file stays
    as it was, and the edit is made at a later open)."""
    temporary = path.with_name(path.name + ".tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(data))
            handle.flush()
            os.fsync(handle.fileno())
        temporary.replace(path)
    except OSError:
        temporary.unlink(missing_ok=True)
        return 0
    try:
        directory = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return 1
    try:
        os.fsync(directory)
    except OSError:
        pass  # some file systems cannot sync a directory; the rename stands
    finally:
        os.close(directory)
    return 1


def create_shard(path: Path, config: q.EdgeConfig) -> q.EdgeShard:
    """A new shard at ``path`` with small WAL segments and vector chunks.

    The engine's Python API takes no WAL options, but loading a directory that holds only its
    persisted config creates the shard from that config, WAL options included: the config is
    written by the engine itself (a shard created aside, then discarded), with the options
    added."""
    aside = path.parent / f"{path.name}.creating"
    shutil.rmtree(aside, ignore_errors=True)
    try:
        q.EdgeShard.create(str(aside), config).close()
        data = json.loads((aside / _CONFIG).read_text(encoding="utf-8"))
    finally:
        shutil.rmtree(aside, ignore_errors=True)
    data["wal_options"] = _WAL_OPTIONS
    path.mkdir(parents=True, exist_ok=True)
    (path / _CONFIG).write_text(json.dumps(data), encoding="utf-8")
    q.EdgeShard.load(str(path)).close()  # the engine lays out the shard from its config
    small_chunks(path)
    return q.EdgeShard.load(str(path))


def load_checked(path: Path) -> q.EdgeShard:
    """Open the shard once the disk has room for every page the engine may touch (on a
    tmpfs, opening faults in whole files): ``StorageSpaceError`` before it maps anything."""
    small_wal(path)
    small_chunks(path)
    vectors_mapped(path, {MAPPED_ALWAYS} | mapped_vectors(path))
    require_backing(path, "opening the memory store")
    shard = q.EdgeShard.load(str(path))
    try:
        require_backing(path, "opening the memory store")  # a new segment the load created
    except BaseException:
        shard.close()
        raise
    return shard


def check_created(path: Path, shard: q.EdgeShard) -> None:
    """A new shard the disk has no room for is removed: no half-made shard stays behind."""
    try:
        require_backing(path, "creating the memory store")
    except StorageSpaceError as exc:
        apparent = apparent_bytes(path)
        shard.close()
        shutil.rmtree(path, ignore_errors=True)
        free = free_bytes(path.parent)
        raise StorageSpaceError(apparent, free, "creating the memory store") from exc
