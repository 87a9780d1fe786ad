"""Logging: structlog to stderr only (stdout is the MCP protocol stream)."""

from __future__ import annotations

import logging
import sys

import structlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure(level: str = "info") -> None:
    numeric = _LEVELS.get(level.lower(), logging.INFO)
    logging.basicConfig(
        stream=sys.stderr, level=max(numeric, logging.WARNING), format="%(message)s", force=True
    )
    for noisy in ("httpx", "httpcore", "mcp", "huggingface_hub", "urllib3"):
        logging.getLogger(noisy).setLevel(max(numeric, logging.WARNING))
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    _quiet_loguru()


def _quiet_loguru() -> None:
    """fastembed logs through loguru; keep it on stderr and at warning level."""
    try:
        from loguru import logger
    except ImportError:  # pragma: no cover - loguru comes with fastembed
        return
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
