"""``ferrex ui``: the command that serves the memory browser (``ferrex.ui``, docs/ui.md)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from ferrex.config import Settings


def add_ui_command(commands: Any, command: Callable[..., Any], flags: Sequence[Any]) -> None:
    ui: argparse.ArgumentParser = command(
        commands,
        "ui",
        flags,
        "browse and curate memories in a local web page",
        "Serve the memory browser on 127.0.0.1 and print its address (with a one-time "
        "token) as the first line; open it in the browser. See docs/ui.md.",
    )
    ui.add_argument("--port", type=int, default=0, metavar="N", help="port (default: a free one)")
    ui.add_argument("--no-browser", action="store_true", help="print the address only")
    ui.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface (another than loopback needs FERREX_HTTP_TOKEN, the login token)",
    )


def run_ui_command(settings: Settings, explicit_tier: bool, args: argparse.Namespace) -> int:
    from ferrex.cli.session import open_backend
    from ferrex.ui.server import UiOptions, run_ui

    options = UiOptions(args.host, args.port, not args.no_browser, settings.namespace)
    return run_ui(open_backend(settings, explicit_tier), options, settings.http_token)
