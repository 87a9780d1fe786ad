"""Logging: structlog to stderr only (stdout is the MCP protocol stream).

Human-readable lines by default (``FERREX_LOG_FORMAT=json`` for one JSON object per line) and,
with ``FERREX_LOG_FILE``, the same lines appended to a file as well. Libraries that log through
the standard ``logging`` module (the MCP SDK, httpx, ...) or loguru (fastembed) go to the same
places at warning level and above.
"""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path
from typing import Any, Literal, TextIO

import structlog

LogFormat = Literal["console", "json"]

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


class _Tee:
    """A file-like object writing to stderr and, optionally, a log file (line-buffered)."""

    def __init__(self, file: TextIO | None) -> None:
        self.file = file
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            sys.stderr.write(text)
            if self.file is not None:
                self.file.write(text)
                self.file.flush()
        return len(text)

    def flush(self) -> None:
        sys.stderr.flush()
        if self.file is not None:
            self.file.flush()


_open_file: TextIO | None = None


def _log_file(path: Path | None) -> TextIO | None:
    global _open_file
    if _open_file is not None:
        _open_file.close()
        _open_file = None
    if path is None:
        return None
    try:
        path.expanduser().parent.mkdir(parents=True, exist_ok=True)
        _open_file = path.expanduser().open("a", encoding="utf-8")
    except OSError as exc:
        sys.stderr.write(f"warning: cannot write the log file {path} ({exc.strerror or exc})\n")
        return None
    return _open_file


def configure(
    level: str = "info", log_format: LogFormat = "console", log_file: Path | None = None
) -> None:
    numeric = _LEVELS.get(level.lower(), logging.INFO)
    sink = _Tee(_log_file(log_file))
    logging.basicConfig(
        stream=sink,  # type: ignore[arg-type]
        level=max(numeric, logging.WARNING),
        format="%(levelname)s %(name)s: %(message)s",
        force=True,
    )
    for noisy in ("httpx", "httpcore", "mcp", "huggingface_hub", "urllib3"):
        logging.getLogger(noisy).setLevel(max(numeric, logging.WARNING))
    processors: list[Any] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if log_format == "json":
        processors += [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    else:
        console = structlog.dev.ConsoleRenderer(colors=False, pad_event_to=0, pad_level=False)
        processors.append(console)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sink),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    _quiet_loguru(sink)


def _quiet_loguru(sink: _Tee) -> None:
    """fastembed logs through loguru; keep it on stderr (and the log file), warning and up."""
    try:
        from loguru import logger
    except ImportError:  # pragma: no cover - loguru comes with fastembed
        return
    logger.remove()

    def write(message: Any) -> None:
        sink.write(str(message))

    logger.add(write, level="WARNING", format="{level} fastembed: {message}")
