"""What the CLI's modules share: the operator error, the store check, the command names."""

from __future__ import annotations

import sys
from typing import Any

from ferrex import registry
from ferrex.config import Settings

IMPORT_BATCH = 500  # memories per import call (each call is one engine request)

TOOL_COMMANDS = registry.TOOL_NAMES  # one command per MCP tool


class CliError(Exception):
    """An operator command failed: ``main`` prints ``error: <message>`` and exits with 2."""

    def __init__(
        self, message: str, code: str = "error", details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        # A tool's refusal as the tool answers it ({"code", "message", ...}); else None.
        self.details = details


CREATING_COMMANDS = ("serve", "init")


def require_store(settings: Settings) -> None:
    """Refuse an operator command on a data dir that holds no ferrex store (creating nothing)."""
    if settings.db_path.expanduser().is_file():
        return
    directory = settings.data_dir.expanduser()
    where = "does not exist" if not directory.exists() else "holds no ferrex store"
    raise CliError(
        f"the data dir {directory} {where}: check --data-dir (or FERREX_HOME); "
        "`ferrex init` creates a store there, as does starting the server",
        code="no_store",
    )


def fail(message: str) -> int:
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    return 2
