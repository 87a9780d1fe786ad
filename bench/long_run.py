"""Shared runner of the long harnesses (crash_long.py, fuzz_long.py): one pytest file, with
environment knobs, timed, from the repository root."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_tests(label: str, test_file: str, knobs: dict[str, str], *pytest_args: str) -> int:
    """Run ``test_file`` with ``knobs`` added to the environment; print the elapsed time."""
    env = {**os.environ, **knobs}
    started = time.monotonic()
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", test_file]
    code = subprocess.call([*command, *pytest_args], cwd=ROOT, env=env)
    print(f"{label}: exit {code} after {time.monotonic() - started:.0f}s", flush=True)
    return code
