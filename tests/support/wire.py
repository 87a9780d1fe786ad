"""Raw JSON-RPC over stdio: the initialize request, a ``ferrex`` process spoken to line by line
(``spawn``) and a handshake with one store (``handshake``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.harness import ferrex_command

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw-wire-test", "version": "1"},
    },
}


def spawn(data: Path, models_dir: Path) -> subprocess.Popen[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(data.parent),
        "FERREX_HOME": str(data),
        "FERREX_MODELS_DIR": str(models_dir),
        "FERREX_OFFLINE": "1",
        "FERREX_LOG": "info",
    }
    return subprocess.Popen(
        [ferrex_command(), "--model-tier", "small"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def handshake(process: subprocess.Popen[str]) -> list[dict]:
    """Speak raw JSON-RPC: every line the server writes to stdout must be a JSON-RPC message."""
    import json

    assert process.stdin is not None and process.stdout is not None
    messages = [
        INITIALIZE,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "store", "arguments": {"content": "raw protocol test memory"}},
        },
    ]
    for message in messages:
        process.stdin.write(json.dumps(message) + "\n")
    process.stdin.flush()
    replies = []
    while len(replies) < 3:
        line = process.stdout.readline()
        assert line, "server closed stdout early"
        replies.append(json.loads(line))
        assert replies[-1]["jsonrpc"] == "2.0"
    return replies
