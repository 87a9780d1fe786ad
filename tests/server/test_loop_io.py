"""stdio read and written on the event loop itself (``server/wire.py``): what a worker thread's
hand-off per line would cost is saved, and nothing is lost, split or reordered for it, nor is a
flag changed on a file another process shares.

Real pipes and sockets throughout (``os.pipe``, ``socket.socketpair``, a subprocess's stdio);
the whole server over them is exercised by every MCP test (tests/server/test_wire.py speaks raw
lines to it).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.support.paths import ROOT

from ferrex.server.wire import LoopLines, LoopWriter, WireEnd

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="pipes are reopened through /proc (Linux)"
)


@dataclass
class Channel:
    """Our end of a pipe pair or a socket (``reads`` / ``writes``, the same socket for both),
    and the client's side: ``send`` to us, ``receive`` from us, ``end_input``."""

    reads: int
    writes: int
    send: Callable[[bytes], None]
    receive: Callable[[int], bytes]
    end_input: Callable[[], None]
    close: Callable[[], None]


def _pipes() -> Channel:
    inbound = os.pipe()  # the client writes, we read
    outbound = os.pipe()  # we write, the client reads
    fds = [*inbound, *outbound]

    def close() -> None:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def send(data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(inbound[1], view) :]

    return Channel(
        reads=inbound[0],
        writes=outbound[1],
        send=send,
        receive=lambda size: os.read(outbound[0], size),
        end_input=lambda: os.close(inbound[1]),
        close=close,
    )


def _socketpair() -> Channel:
    ours, theirs = socket.socketpair()

    def close() -> None:
        ours.close()
        theirs.close()

    return Channel(
        reads=ours.fileno(),
        writes=ours.fileno(),
        send=theirs.sendall,
        receive=theirs.recv,
        end_input=lambda: theirs.shutdown(socket.SHUT_WR),
        close=close,
    )


@pytest.fixture(params=["pipes", "socketpair"])
def channel(request: pytest.FixtureRequest) -> Iterator[Channel]:
    made = _pipes() if request.param == "pipes" else _socketpair()
    yield made
    made.close()


async def _ticking(ticks: list[int], done: anyio.Event) -> None:
    while not done.is_set():
        ticks.append(1)
        await anyio.sleep(0.001)


async def test_lines_are_read_whole_on_the_loop(channel: Channel) -> None:
    long_line = b"x" * 300_000  # over several reads
    pieces = [
        b'{"a":1}\n{"b"',
        b":2}\n\n",
        b"\xff\xfe bad bytes\n",
        long_line[:100_000],
        long_line[100_000:] + b"\n",
        "caf\u00e9 ".encode()[:4],  # a character split between two reads
        "caf\u00e9 ".encode()[4:],
        b"last",
    ]

    def writer() -> None:
        for piece in pieces:
            channel.send(piece)
            time.sleep(0.03)  # each piece its own read; the loop waits between them
        channel.end_input()

    end = WireEnd.of(channel.reads, writing=False)
    assert end is not None
    lines: list[str] = []
    ticks: list[int] = []
    done = anyio.Event()
    threading.Thread(target=writer, daemon=True).start()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_ticking, ticks, done)
        async for line in LoopLines(end):
            lines.append(line)
        done.set()
    end.close()
    assert lines == [
        '{"a":1}\n',
        '{"b":2}\n',
        "\n",
        "\udcff\udcfe bad bytes\n",  # invalid bytes as lone surrogates, as the SDK then refuses
        "x" * 300_000 + "\n",
        "caf\u00e9 last",  # a last line without its newline still counts
    ]
    assert len(ticks) > 20  # the loop ran other work while it waited for the writer
    assert os.get_blocking(channel.reads)  # the shared file is untouched


async def test_a_message_larger_than_the_buffer_is_written_whole_while_the_loop_runs(
    channel: Channel,
) -> None:
    text = "".join(f"{i:07d} é—memory\n" for i in range(60_000))  # ~1 MB, multi-byte characters
    expected = text.encode("utf-8")
    received = bytearray()

    def slow_reader() -> None:
        while len(received) < len(expected):
            received.extend(channel.receive(1 << 16))
            time.sleep(0.002)

    end = WireEnd.of(channel.writes, writing=True)
    assert end is not None
    reader = threading.Thread(target=slow_reader, daemon=True)
    reader.start()
    ticks: list[int] = []
    done = anyio.Event()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_ticking, ticks, done)
        out = LoopWriter(end)
        assert await out.write(text) == len(text)
        await out.flush()
        done.set()
    reader.join(10)
    end.close()
    assert bytes(received) == expected
    assert len(ticks) > 5  # the buffer filled: the loop served other tasks until it drained
    # The shared descriptor still blocks: the writer's non-blocking file (or flag) is its own.
    assert os.get_blocking(channel.writes)


WIRE_SNIPPET = """
    import os, sys, anyio
    from ferrex.server.wire import LoopWriter, stdio_wire

    async def main():
        original = os.dup(1)
        with stdio_wire() as (source, out):
            sys.stderr.write(f"loop={type(source).__name__} writer={out is not None}\\n")
            sys.stderr.write(f"original blocks={os.get_blocking(original)}\\n")
            sys.stderr.write(f"fd 0 reads={os.read(0, 10)!r}\\n")
            os.write(1, b"stray output of a library\\n")
            print("buffered stray output")
            if out is not None:
                await out.write("the wire\\n")
                async for line in source:
                    await out.write(f"echo {line}")
        os.write(1, b"after\\n")

    anyio.run(main)
"""


def _run(stdout: Any, stdin: Any = subprocess.PIPE) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(WIRE_SNIPPET)],
        input=b"one\ntwo\n" if stdin is subprocess.PIPE else None,
        stdin=None if stdin is subprocess.PIPE else stdin,
        stdout=stdout,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        timeout=60,
        check=True,
    )


def test_while_serving_only_the_wire_reaches_stdout_and_children_read_no_request(
    tmp_path: Path,
) -> None:
    piped = _run(subprocess.PIPE)
    assert piped.stdout == b"the wire\necho one\necho two\nafter\n"
    assert b"loop=LoopLines writer=True" in piped.stderr
    assert b"original blocks=True" in piped.stderr  # the client's file was not made non-blocking
    assert b"fd 0 reads=b''" in piped.stderr  # fd 0 is /dev/null while serving
    assert b"stray output of a library" in piped.stderr
    assert b"buffered stray output" in piped.stderr  # flushed to stderr, never onto the wire

    # Not a pipe (a file): the SDK's own streams (and its own claim of fd 1) serve.
    target = tmp_path / "out.txt"
    with target.open("wb") as handle:
        to_file = _run(handle)
    assert b"writer=False" in to_file.stderr
    assert b"loop=LoopLines" not in to_file.stderr


def test_one_socket_as_stdin_and_stdout_serves_on_the_loop() -> None:
    ours, theirs = socket.socketpair()
    with theirs:
        process = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(WIRE_SNIPPET)],
            stdin=theirs.fileno(),
            stdout=theirs.fileno(),
            stderr=subprocess.PIPE,
            cwd=ROOT,
        )
    with ours:
        ours.sendall(b"one\n")
        ours.shutdown(socket.SHUT_WR)
        answer = bytearray()
        while chunk := ours.recv(1 << 16):
            answer.extend(chunk)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0
    assert bytes(answer) == b"the wire\necho one\nafter\n"
    assert b"loop=LoopLines writer=True" in stderr
