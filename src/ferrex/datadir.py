"""The data dir: created private (0700), and what to do when it cannot be used.

Its own module, light to import: every command checks the data dir before anything else, and
the server does so before it answers the MCP handshake (the engine is imported later).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import structlog

log = structlog.get_logger("ferrex.bootstrap")


class DataDirError(Exception):
    """The data dir cannot be created or used."""


def ensure_data_dir(path: Path) -> Path:
    """Create the data dir with mode 0700 (memories are private); tighten an existing one,
    saying so in the log (stderr)."""
    path = path.expanduser()
    try:
        if path.exists() and not path.is_dir():
            raise DataDirError(
                f"the data dir {path} exists and is not a directory; pass --data-dir DIR "
                "(or set FERREX_HOME) with a directory"
            )
        existed = path.exists()
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            os.chmod(path, 0o700)
            if existed:
                log.warning(
                    "tightened the permissions of the data dir to 0o700 (memories are private)",
                    path=str(path),
                    was=oct(mode),
                )
    except OSError as exc:
        raise DataDirError(
            f"cannot use {path} as the data dir ({exc.strerror or exc}); pass --data-dir DIR "
            "(or set FERREX_HOME) with a directory you can write"
        ) from None
    return path


def shared_model_cache() -> Path:
    """The model cache every data dir shares by default: ``$XDG_CACHE_HOME/ferrex/models``
    (``~/.cache/ferrex/models``); ``models_dir`` (``FERREX_MODELS_DIR``) overrides it."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if base and Path(base).is_absolute() else Path("~/.cache").expanduser()
    return root / "ferrex" / "models"
