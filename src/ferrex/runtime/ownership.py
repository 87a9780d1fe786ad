"""Who owns a data dir: the owner lock and the engine socket's path.

The first process to take ``<data dir>/ferrex.lock`` (an exclusive ``flock``, released when the
process exits, however it exits) owns the store; the others reach it over a Unix socket in the
data dir (see ``ferrex.runtime.shared``).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import tempfile
from pathlib import Path

_UNIX_PATH_MAX = 100


def socket_path(data_dir: Path) -> Path:
    candidate = data_dir / "ferrex.sock"
    if len(str(candidate)) <= _UNIX_PATH_MAX:
        return candidate
    # Deep data dirs: a per-user 0700 directory in the temp dir (never an abstract socket,
    # which any local user could reach).
    short = Path(tempfile.gettempdir()) / f"ferrex-{os.getuid()}"
    short.mkdir(mode=0o700, exist_ok=True)
    os.chmod(short, 0o700)
    digest = hashlib.sha1(str(data_dir.resolve()).encode()).hexdigest()[:16]
    return short / f"{digest}.sock"


class OwnerLock:
    """An exclusive, non-blocking ``flock`` on ``<data dir>/ferrex.lock`` (released on exit)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "ferrex.lock"
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                return False
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def is_free(self) -> bool:
        """No process holds the lock (the owner has exited): a probe that takes nothing."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                return False
            raise
        finally:
            os.close(fd)  # closing releases the probe's shared lock at once
        return True

    @property
    def held(self) -> bool:
        return self._fd is not None

    def owner_pid(self) -> int | None:
        try:
            text = self.path.read_text(encoding="utf-8").strip()
            return int(text) if text else None
        except (OSError, ValueError):
            return None

    def release(self) -> None:
        if self._fd is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = None


class AttachLock:
    """A shared ``flock`` on ``<data dir>/ferrex.attached`` held by every ferrex process on the
    data dir (engine and peers alike) for its lifetime: the owner leaving can tell whether it
    is the last one (then it stops the Qdrant sidecar) or another process will take over."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "ferrex.attached"
        self._fd: int | None = None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits while a leaving owner stops the sidecar
        self._fd = fd

    def alone(self) -> bool:
        """True when no other process is attached. Holds the lock exclusively until
        ``release`` (a process arriving meanwhile waits for the sidecar to be stopped)."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # converts our shared lock
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                return False
            raise
        return True

    def release(self) -> None:
        if self._fd is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = None


_ATTACHED: dict[Path, AttachLock] = {}


def attached(data_dir: Path) -> AttachLock:
    """This process's attach lock on ``data_dir`` (one per process and data dir)."""
    key = data_dir.resolve()
    lock = _ATTACHED.get(key)
    if lock is None:
        lock = _ATTACHED[key] = AttachLock(key)
    return lock
