"""stdio read and written on the event loop itself (``server/wire.py``): what a worker thread's
hand-off per line would cost is saved, and nothing is lost, split or reordered for it.

Real pipes throughout (``os.pipe``, a subprocess's stdout); the whole server over them is
exercised by every MCP test (tests/test_wire.py speaks raw lines to it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import anyio

from ferrex.server.wire import LoopLines, LoopWriter

ROOT = Path(__file__).resolve().parent.parent


async def _ticking(ticks: list[int], done: anyio.Event) -> None:
    while not done.is_set():
        ticks.append(1)
        await anyio.sleep(0.001)


async def test_lines_of_a_pipe_are_read_whole_on_the_loop() -> None:
    read_end, write_end = os.pipe()
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
            os.write(write_end, piece)
            time.sleep(0.03)  # each piece its own read; the loop waits between them
        os.close(write_end)

    lines: list[str] = []
    ticks: list[int] = []
    done = anyio.Event()
    threading.Thread(target=writer, daemon=True).start()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_ticking, ticks, done)
        async for line in LoopLines(read_end):
            lines.append(line)
        done.set()
    assert lines == [
        '{"a":1}\n',
        '{"b":2}\n',
        "\n",
        "\udcff\udcfe bad bytes\n",  # invalid bytes as lone surrogates, as the SDK then refuses
        "x" * 300_000 + "\n",
        "caf\u00e9 last",  # a last line without its newline still counts
    ]
    assert len(ticks) > 20  # the loop ran other work while it waited for the writer
    try:
        os.fstat(read_end)
        closed = False
    except OSError:
        closed = True
    assert closed, "the reader's descriptor is closed when its input ends"


async def test_a_message_larger_than_the_pipe_is_written_whole_while_the_loop_runs() -> None:
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    text = "".join(f"{i:07d} é—memory\n" for i in range(60_000))  # ~1 MB, multi-byte characters
    expected = text.encode("utf-8")
    received = bytearray()

    def slow_reader() -> None:
        while len(received) < len(expected):
            received.extend(os.read(read_end, 1 << 16))
            time.sleep(0.002)

    reader = threading.Thread(target=slow_reader, daemon=True)
    reader.start()
    ticks: list[int] = []
    done = anyio.Event()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_ticking, ticks, done)
        out = LoopWriter(write_end)
        assert await out.write(text) == len(text)
        await out.flush()
        done.set()
    reader.join(10)
    os.close(read_end)
    os.close(write_end)
    assert bytes(received) == expected
    assert len(ticks) > 5  # the pipe filled: the loop served other tasks until it drained


def _run_snippet(code: str, stdout: Any) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=stdout,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        timeout=60,
        check=True,
    )


WRITER_SNIPPET = """
    import os, sys, anyio
    from ferrex.server.wire import stdout_writer

    async def main():
        with stdout_writer() as out:
            sys.stderr.write(f"writer={out is not None}\\n")
            os.write(1, b"stray output of a library\\n")
            if out is not None:
                await out.write("the wire\\n")
        os.write(1, b"after\\n")

    anyio.run(main)
"""


def test_stdout_is_the_wire_alone_while_serving_and_is_restored_after(tmp_path: Path) -> None:
    piped = _run_snippet(WRITER_SNIPPET, subprocess.PIPE)
    assert piped.stdout == b"the wire\nafter\n"
    assert b"writer=True" in piped.stderr
    assert b"stray output of a library" in piped.stderr

    # Not a pipe (a file): the SDK's own streams (and its own claim of fd 1) are kept.
    target = tmp_path / "out.txt"
    with target.open("wb") as handle:
        to_file = _run_snippet(WRITER_SNIPPET, handle)
    assert b"writer=False" in to_file.stderr
    assert target.read_bytes() == b"stray output of a library\nafter\n"
