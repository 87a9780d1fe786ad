"""Raw JSON-RPC lines over stdio: every request gets an answer, even one the SDK cannot parse.

The SDK client never sends such lines, so these tests speak the wire protocol by hand to a real
``ferrex`` subprocess.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tests.support.harness import ferrex_command
from tests.support.wire import INITIALIZE

from ferrex.core.errors import FerrexError
from ferrex.core.service import MemoryService
from ferrex.server.calls import run_tool as invoke


class Wire:
    def __init__(self, data_dir: Path, models_dir: Path) -> None:
        env = {
            **os.environ,
            "FERREX_HOME": str(data_dir),
            "FERREX_MODELS_DIR": str(models_dir),
            "FERREX_OFFLINE": "1",
            "FERREX_LOG": "error",
        }
        self.process = subprocess.Popen(
            [ferrex_command(), "--model-tier", "small"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        assert self.process.stdout is not None
        stdout = self.process.stdout
        threading.Thread(target=lambda: [self.lines.put(x) for x in stdout], daemon=True).start()

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def send_bytes(self, line: bytes) -> None:
        """A raw line, bytes as given (invalid UTF-8 included)."""
        assert self.process.stdin is not None
        self.process.stdin.flush()
        self.process.stdin.buffer.write(line + b"\n")
        self.process.stdin.buffer.flush()

    def receive(self) -> dict[str, Any]:
        return dict(json.loads(self.lines.get(timeout=60)))

    def close(self) -> int:
        assert self.process.stdin is not None
        self.process.stdin.close()
        return self.process.wait(timeout=60)


@pytest.fixture
def wire(tmp_path: Path, models_dir: Path) -> Any:
    connection = Wire(tmp_path / "d", models_dir)
    connection.send(json.dumps(INITIALIZE))
    assert connection.receive()["id"] == 1
    connection.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    yield connection
    if connection.process.poll() is None:
        connection.process.kill()


BAD_LINES = [
    # (line, expected id, expected JSON-RPC code)
    (
        '{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"cursor":"x\\udc00"}}',
        2,
        -32600,
    ),
    ('{"jsonrpc": "2.0", "id": 3, ', None, -32700),
    ("[1, 2, 3]", None, -32600),
    ('{"jsonrpc":"1.0","id":"four","method":"tools/list"}', "four", -32600),
    ("not json at all", None, -32700),
    ('{"jsonrpc":"2.0","id":null,"method":"tools/list"}', None, -32600),
    ('{"jsonrpc":"2.0","id":9.5,"method":"tools/list"}', None, -32600),
    ('{"jsonrpc":"2.0","id":true,"method":"tools/list"}', None, -32600),
]


def test_every_malformed_request_line_gets_an_error_reply_and_the_server_goes_on(
    wire: Wire,
) -> None:
    for line, request_id, code in BAD_LINES:
        wire.send(line)
        reply = wire.receive()
        assert reply["id"] == request_id, (line, reply)
        assert reply["error"]["code"] == code, (line, reply)
        assert "Traceback" not in reply["error"]["message"]
    # An invalid notification (no id) gets no reply; the next request is answered normally.
    wire.send('{"jsonrpc":"2.0","method":"notifications/x","params":"\\udc00"}')
    wire.send(json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}))
    reply = wire.receive()
    assert reply["id"] == 9 and len(reply["result"]["tools"]) == 5
    call = {
        "jsonrpc": "2.0",
        "id": 10,
        "method": "tools/call",
        "params": {"name": "stats", "arguments": {}},
    }
    wire.send(json.dumps(call))
    reply = wire.receive()
    assert reply["id"] == 10 and reply["result"]["structuredContent"]["total"] == 0
    assert wire.close() == 0


def tool_call(request_id: int, tool: str, arguments: bytes) -> bytes:
    head = f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call","params":{{"name":"{tool}",'
    return head.encode() + b'"arguments":' + arguments + b"}}"


BAD_TEXT = [
    # (arguments as raw JSON bytes, the parameter named in the refusal)
    (b'{"content":"deployed build \xff\xfe to staging"}', "content"),
    (b'{"subject":"api","predicate":"uses","object":"tokio \xc3"}', "object"),
    (b'{"content":"a note","entities":["ok","db-\xed\xa0\x80"]}', "entities[1]"),
    (b'{"content":"lone surrogate \\udc00 escaped"}', "content"),
    (b'{"content":"a note","context":{"k":"\\ud800"}}', "context.k"),
]


def test_invalid_utf8_or_a_lone_surrogate_in_a_parameter_is_refused_and_stores_nothing(
    wire: Wire,
) -> None:
    """Raw bytes on the server's stdin: text that is not valid UTF-8 is never stored as U+FFFD
    (nor as anything else); the call gets the tool's invalid_params naming the parameter."""
    for n, (arguments, field) in enumerate(BAD_TEXT):
        wire.send_bytes(tool_call(20 + n, "store", arguments))
        reply = wire.receive()
        assert reply["id"] == 20 + n, reply
        result = reply["result"]
        assert result["isError"] is True, reply
        # Like every tool error: the JSON text only, no structured content to fail a client's
        # output-schema check.
        assert "structuredContent" not in result, reply
        error = json.loads(result["content"][0]["text"])["error"]
        assert error["code"] == "invalid_params" and error["field"] == field, error
        assert "UTF-8" in error["message"] and "Nothing was stored" in error["message"]
    wire.send_bytes(tool_call(40, "recall", b'{"query":"build \xff"}'))
    refused = wire.receive()["result"]
    assert json.loads(refused["content"][0]["text"])["error"]["code"] == "invalid_params"
    wire.send_bytes(tool_call(41, "stats", b"{}"))
    assert wire.receive()["result"]["structuredContent"]["total"] == 0
    # Valid UTF-8 (non-ASCII included) is stored as sent.
    wire.send_bytes(tool_call(42, "store", '{"content":"déployé build 1.4.2 ✓"}'.encode()))
    assert wire.receive()["result"]["structuredContent"]["status"] == "stored"
    wire.send_bytes(tool_call(43, "stats", b"{}"))
    assert wire.receive()["result"]["structuredContent"]["total"] == 1
    assert wire.close() == 0


def test_a_lone_surrogate_reaching_the_service_is_refused_too(service: MemoryService) -> None:
    """Whatever the transport (stdio, HTTP, in-process), text that cannot be UTF-8 is refused."""
    with pytest.raises(FerrexError) as error:
        invoke(service, "store", {"content": "ok", "entities": ["db-\udc80"]})
    assert error.value.code == "invalid_params" and error.value.details["field"] == "entities[0]"
    assert service.meta.count_memories() == 0


def test_a_tool_called_without_listing_tools_first_is_answered(wire: Wire) -> None:
    """The engine opens at the first tools/list, the first call or after a short grace: a
    client that calls straight away (a cached tool list) must not wait for the grace."""
    wire.send_bytes(tool_call(2, "store", b'{"content": "the wire test stored this"}'))
    reply = wire.receive()
    assert reply["id"] == 2 and reply["result"]["structuredContent"]["status"] == "stored"
    wire.send_bytes(tool_call(3, "recall", b'{"query": "what the wire test stored"}'))
    reply = wire.receive()
    results = reply["result"]["structuredContent"]["results"]
    assert [r["content"] for r in results] == ["the wire test stored this"]
    assert wire.close() == 0


def test_a_server_whose_client_never_asks_opens_its_store_after_the_grace(
    tmp_path: Path, models_dir: Path
) -> None:
    """No tools/list and no call: the engine still opens (it owns the data dir, so another
    process reaches the store through it), and input ending closes it cleanly."""
    from ferrex.runtime.ownership import socket_path
    from ferrex.server.app import ENGINE_START_GRACE

    data = tmp_path / "d"
    connection = Wire(data, models_dir)
    try:
        connection.send(json.dumps(INITIALIZE))
        assert connection.receive()["id"] == 1
        deadline = time.monotonic() + 60 + ENGINE_START_GRACE
        while not socket_path(data).exists():
            assert time.monotonic() < deadline, "the engine never opened"
            time.sleep(0.05)
        assert connection.close() == 0
    finally:
        if connection.process.poll() is None:
            connection.process.kill()
