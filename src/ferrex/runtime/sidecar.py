"""The managed Qdrant sidecar: a local ``qdrant`` process the owner of a data dir runs for it.

Everything lives in the data dir (mode 0700):

- ``qdrant-sidecar.yaml``  the config ferrex writes (storage under ``qdrant-data/``, HTTP and
  gRPC on free ports, bound to 127.0.0.1 only, telemetry off, an API key);
- ``qdrant-api-key``       the generated key (0600), kept across restarts;
- ``qdrant.pid``           JSON: pid, ports, binary, config (written once the sidecar is ready);
- ``qdrant.log``           the sidecar's stdout and stderr (ferrex's stdout is the protocol).

A live sidecar left by an earlier owner (killed, or exiting while other ferrex processes were
attached) is reused when it answers on its recorded port with this data dir's key; a PID file
naming a dead or foreign process is removed. The last ferrex process to leave stops it
(SIGTERM, SIGKILL after a grace period).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from ferrex.core import errors
from ferrex.core.errors import FerrexError

log = structlog.get_logger("ferrex.sidecar")

HOST = "127.0.0.1"
CONFIG_NAME = "qdrant-sidecar.yaml"
KEY_NAME = "qdrant-api-key"
PID_NAME = "qdrant.pid"
LOG_NAME = "qdrant.log"
STORAGE_NAME = "qdrant-data"
READY_TIMEOUT_SECONDS = 60.0
STOP_GRACE_SECONDS = 10.0
_PROBE_TIMEOUT_SECONDS = 1.0
_START_ATTEMPTS = 3  # a picked port can be taken before qdrant binds it: pick again


@dataclass(frozen=True)
class Binary:
    path: Path
    found_by: str  # "--qdrant-bin / FERREX_QDRANT_BIN", "PATH", "<data dir>/bin/qdrant"


def find_binary(configured: Path | None, data_dir: Path) -> Binary | None:
    """The ``qdrant`` to run: ``--qdrant-bin`` / ``FERREX_QDRANT_BIN``, then PATH, then
    ``<data dir>/bin/qdrant``. A configured path that is not an executable is an error (it
    was asked for), never silently skipped."""
    if configured is not None:
        path = configured.expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise FerrexError(
                errors.UNAVAILABLE,
                f"the configured qdrant binary {path} is not an executable file; fix "
                "--qdrant-bin / FERREX_QDRANT_BIN (or unset it to use PATH)",
            )
        return Binary(path, "--qdrant-bin / FERREX_QDRANT_BIN")
    on_path = shutil.which("qdrant")
    if on_path:
        return Binary(Path(on_path), "PATH")
    local = data_dir / "bin" / "qdrant"
    if local.is_file() and os.access(local, os.X_OK):
        return Binary(local, "<data dir>/bin/qdrant")
    return None


@dataclass(frozen=True)
class Endpoint:
    """A running sidecar, as a client needs it."""

    pid: int
    http_port: int
    grpc_port: int
    api_key: str
    reused: bool

    def describe(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "host": HOST,
            "http_port": self.http_port,
            "grpc_port": self.grpc_port,
            "reused": self.reused,
        }


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def render_yaml(data: dict[str, Any], indent: int = 0) -> str:
    """Block YAML for nested mappings of scalars (scalars as JSON, which YAML reads)."""
    lines: list[str] = []
    for key, value in data.items():
        if isinstance(value, dict):
            lines.append(f"{' ' * indent}{key}:")
            lines.append(render_yaml(value, indent + 2).rstrip("\n"))
        else:
            lines.append(f"{' ' * indent}{key}: {json.dumps(value)}")
    return "\n".join(lines) + "\n"


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 from the first byte (atomic rename)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, but another user's: never ours
    with contextlib.suppress(OSError, ValueError):
        # A zombie (exited, not yet reaped by its parent) is not alive for our purposes.
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "Z":
            return False
    return True


class Sidecar:
    """The sidecar of one data dir (one object per ferrex process that owns the store)."""

    def __init__(
        self,
        data_dir: Path,
        binary: Binary | None,
        *,
        ready_timeout: float = READY_TIMEOUT_SECONDS,
        stop_grace: float = STOP_GRACE_SECONDS,
    ) -> None:
        self.data_dir = data_dir
        self.binary = binary
        self.ready_timeout = ready_timeout
        self.stop_grace = stop_grace
        self.config_path = data_dir / CONFIG_NAME
        self.key_path = data_dir / KEY_NAME
        self.pid_path = data_dir / PID_NAME
        self.log_path = data_dir / LOG_NAME
        self.storage_path = data_dir / STORAGE_NAME
        self.endpoint: Endpoint | None = None
        self._process: subprocess.Popen[bytes] | None = None

    # ------------------------------------------------------------------ files

    def api_key(self) -> str:
        """The data dir's key: generated once (0600), reused by every later sidecar."""
        with contextlib.suppress(OSError):
            key = self.key_path.read_text(encoding="utf-8").strip()
            if key:
                os.chmod(self.key_path, 0o600)
                return key
        key = secrets.token_urlsafe(32)
        _write_private(self.key_path, key + "\n")
        return key

    def config(self, http_port: int, grpc_port: int, api_key: str) -> dict[str, Any]:
        return {
            "log_level": "WARN",
            "storage": {
                "storage_path": str(self.storage_path),
                "snapshots_path": str(self.storage_path / "snapshots"),
            },
            "service": {
                "host": HOST,
                "http_port": http_port,
                "grpc_port": grpc_port,
                "api_key": api_key,
                "enable_cors": False,
            },
            "telemetry_disabled": True,
        }

    def read_pid_file(self) -> dict[str, Any] | None:
        try:
            record = json.loads(self.pid_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict):
            return None
        try:
            record["pid"] = int(record["pid"])
            record["http_port"] = int(record["http_port"])
            record["grpc_port"] = int(record["grpc_port"])
        except (KeyError, TypeError, ValueError):
            return None
        return record

    # ------------------------------------------------------------------ probes

    def _get(self, port: int, path: str, api_key: str | None) -> int | None:
        request = urllib.request.Request(f"http://{HOST}:{port}{path}")
        if api_key:
            request.add_header("api-key", api_key)
        try:
            with urllib.request.urlopen(request, timeout=_PROBE_TIMEOUT_SECONDS) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except (OSError, ValueError):
            return None

    def ready(self, port: int) -> bool:
        """Qdrant's readiness endpoint answers 200."""
        return self._get(port, "/readyz", None) == 200

    def answers_with_our_key(self, port: int, api_key: str) -> bool:
        """The server on ``port`` accepts this data dir's key (so it is our sidecar)."""
        return self._get(port, "/collections", api_key) == 200

    # ------------------------------------------------------------------ lifecycle

    def ensure_running(self) -> Endpoint:
        """Reuse this data dir's live sidecar, or start one; return how to reach it."""
        api_key = self.api_key()
        reused = self._reuse(api_key)
        if reused is not None:
            self.endpoint = reused
            log.info("reusing the running qdrant sidecar", pid=reused.pid, port=reused.http_port)
            return reused
        last: FerrexError | None = None
        for _ in range(_START_ATTEMPTS):
            try:
                self.endpoint = self._start(api_key)
                return self.endpoint
            except _PortTaken as exc:
                last = exc.error
        assert last is not None
        raise last

    def _reuse(self, api_key: str) -> Endpoint | None:
        record = self.read_pid_file()
        if record is None:
            if self.pid_path.exists():
                log.warning("removed an unreadable qdrant sidecar PID file")
                self.pid_path.unlink(missing_ok=True)
            return None
        pid, port = record["pid"], record["http_port"]
        if not pid_alive(pid):
            log.info("removed a stale qdrant sidecar PID file (the process is gone)", pid=pid)
            self.pid_path.unlink(missing_ok=True)
            return None
        deadline = time.monotonic() + min(self.ready_timeout, 10.0)
        delay = 0.05
        while True:  # it may still be starting (its owner was killed during start-up)
            if self.answers_with_our_key(port, api_key) and self.ready(port):
                return Endpoint(pid, port, record["grpc_port"], api_key, reused=True)
            if not pid_alive(pid) or time.monotonic() >= deadline:
                break
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
        if pid_alive(pid) and self._is_our_process(pid):
            log.warning("stopping a qdrant sidecar that does not answer", pid=pid)
            self._terminate(pid)
        else:
            log.info("removed a stale qdrant sidecar PID file (not our sidecar)", pid=pid)
        self.pid_path.unlink(missing_ok=True)
        return None

    def _is_our_process(self, pid: int) -> bool:
        """The process runs with our config (Linux: its command line names our config file)."""
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return str(self.config_path).encode() in argv

    def _start(self, api_key: str) -> Endpoint:
        if self.binary is None:
            raise FerrexError(errors.UNAVAILABLE, "no qdrant binary to start the sidecar with")
        http_port, grpc_port = free_port(), free_port()
        while grpc_port == http_port:
            grpc_port = free_port()
        self.storage_path.mkdir(mode=0o700, parents=True, exist_ok=True)
        _write_private(self.config_path, render_yaml(self.config(http_port, grpc_port, api_key)))
        log_file = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        os.chmod(self.log_path, 0o600)
        try:
            process = subprocess.Popen(
                [str(self.binary.path), "--config-path", str(self.config_path)],
                cwd=self.storage_path,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                start_new_session=True,  # a terminal's Ctrl-C reaches ferrex, not the sidecar
            )
        except OSError as exc:
            raise FerrexError(
                errors.UNAVAILABLE,
                f"cannot start the qdrant sidecar ({exc.strerror or exc}); check the binary "
                "(--qdrant-bin), or run `ferrex migrate-index --to embedded`",
            ) from None
        finally:
            log_file.close()
        self._process = process
        started = time.monotonic()
        delay = 0.05
        while True:
            if process.poll() is not None:
                if self._port_taken():
                    raise _PortTaken(self._failed(f"exited with status {process.returncode}"))
                raise self._failed(f"exited with status {process.returncode} during start-up")
            if self.ready(http_port):
                break
            if time.monotonic() - started > self.ready_timeout:
                self._terminate(process.pid)
                raise self._failed(f"was not ready after {self.ready_timeout:.0f} s")
            time.sleep(delay)
            delay = min(delay * 2, 1.0)  # bounded backoff
        record = {
            "pid": process.pid,
            "http_port": http_port,
            "grpc_port": grpc_port,
            "binary": str(self.binary.path),
            "config": str(self.config_path),
        }
        _write_private(self.pid_path, json.dumps(record) + "\n")
        log.info(
            "started the qdrant sidecar",
            pid=process.pid,
            http_port=http_port,
            grpc_port=grpc_port,
            seconds=round(time.monotonic() - started, 2),
        )
        return Endpoint(process.pid, http_port, grpc_port, api_key, reused=False)

    def _port_taken(self) -> bool:
        with contextlib.suppress(OSError):
            tail = self.log_path.read_bytes()[-4000:].lower()
            return b"address already in use" in tail or b"addrinuse" in tail
        return False

    def _failed(self, what: str) -> FerrexError:
        tail = ""
        with contextlib.suppress(OSError):
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
            tail = " | ".join(line.strip() for line in lines[-3:] if line.strip())[:400]
        log.error("the qdrant sidecar failed to start", what=what, log_tail=tail)
        return FerrexError(
            errors.UNAVAILABLE,
            f"the qdrant sidecar {what}; see qdrant.log in the data dir, or run "
            "`ferrex migrate-index --to embedded` to use the embedded engine",
        )

    def _terminate(self, pid: int) -> None:
        """SIGTERM, then SIGKILL after the grace period; reaps our own child."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace
        while time.monotonic() < deadline:
            if self._process is not None and self._process.pid == pid:
                if self._process.poll() is not None:
                    return
            elif not pid_alive(pid):
                return
            time.sleep(0.05)
        log.warning("the qdrant sidecar ignored SIGTERM; killing it", pid=pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if self._process is not None and self._process.pid == pid:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=5)

    def stop(self) -> bool:
        """Stop this data dir's sidecar (ours, or one we reused); False if none ran."""
        record = self.read_pid_file()
        pid = record["pid"] if record else (self.endpoint.pid if self.endpoint else None)
        stopped = False
        if pid is not None and pid_alive(pid):
            ours = (self._process is not None and self._process.pid == pid) or (
                self._is_our_process(pid)
                or (
                    record is not None
                    and self.answers_with_our_key(record["http_port"], self.api_key())
                )
            )
            if ours:
                self._terminate(pid)
                stopped = True
                log.info("stopped the qdrant sidecar", pid=pid)
        self.pid_path.unlink(missing_ok=True)
        self.endpoint = None
        return stopped

    def release(self, alone: Callable[[], bool]) -> None:
        """On leaving: stop the sidecar when no other ferrex process is attached to the data
        dir (``alone()``); otherwise leave it running for the one that takes over."""
        if alone():
            self.stop()
        else:
            log.info("left the qdrant sidecar running for the other ferrex processes")


class _PortTaken(Exception):
    def __init__(self, error: FerrexError) -> None:
        super().__init__(error.message)
        self.error = error


def connect_client(endpoint: Endpoint, timeout: int = 10) -> Any:
    """A ``QdrantClient`` for the sidecar over gRPC (the design's protocol), with its key."""
    from qdrant_client import QdrantClient

    with warnings.catch_warnings():
        # "Api key is used with an insecure connection": the sidecar is on loopback only.
        warnings.simplefilter("ignore")
        return QdrantClient(
            host=HOST,
            port=endpoint.http_port,
            grpc_port=endpoint.grpc_port,
            prefer_grpc=True,
            https=False,
            api_key=endpoint.api_key,
            timeout=timeout,
            check_compatibility=False,
        )
