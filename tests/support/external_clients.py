"""Where tests keep the clients they install themselves (an mcp 1.x virtualenv, the MCP
Inspector from npm): ``$FERREX_TEST_CACHE`` or ~/.cache/ferrex-tests, reused between runs."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    root = os.environ.get("FERREX_TEST_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "ferrex-tests"
