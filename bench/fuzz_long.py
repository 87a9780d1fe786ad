"""Long fuzzing run: tests/server/test_fuzz.py's properties with many more (and fresh)
generated calls.

    python bench/fuzz_long.py                  # 1,000 examples per tool (~60,000 calls)
    python bench/fuzz_long.py --examples 5000

Unlike the CI test (which replays the same derandomized calls every run), every run here
generates new calls. One MCP session, one ``ferrex`` server; exits non-zero on the first call
that kills the server, leaks internals in an error or changes the store while rejected.
"""

from __future__ import annotations

import argparse

from long_run import run_tests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--examples", type=int, default=1_000, help="hypothesis examples per tool (default 1000)"
    )
    args = parser.parse_args()
    print(f"fuzz_long: {args.examples} examples per tool (8-16 calls each)", flush=True)
    knobs = {"FERREX_TEST_FUZZ_EXAMPLES": str(args.examples), "FERREX_TEST_FUZZ_RANDOM": "1"}
    return run_tests("fuzz_long", "tests/server/test_fuzz.py", knobs, "-k", "thousands")


if __name__ == "__main__":
    raise SystemExit(main())
