"""Long crash-safety run: the SIGKILL harness of tests/store/test_crash_safety.py with many
more kills.

    python bench/crash_long.py                 # 200 random kills + the 6 phase-hooked ones
    python bench/crash_long.py --runs 1000 --seed 7

Each run restarts a real ``ferrex`` server on the same data dir, checks that every acknowledged
write survived and nothing is half-present (``ferrex doctor --json`` in agreement), then writes
until it is killed again. Prints pytest's summary; exits non-zero on the first violation.
"""

from __future__ import annotations

import argparse
import random

from long_run import run_tests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="random-delay kills (default 200)")
    parser.add_argument("--seed", type=int, default=random.randrange(1 << 30))
    args = parser.parse_args()
    print(f"crash_long: {args.runs} random kills + 6 hooked, seed {args.seed}", flush=True)
    knobs = {
        "FERREX_TEST_CRASH_RANDOM_RUNS": str(args.runs),
        "FERREX_TEST_CRASH_SEED": str(args.seed),
    }
    return run_tests(f"crash_long (seed {args.seed})", "tests/store/test_crash_safety.py", knobs)


if __name__ == "__main__":
    raise SystemExit(main())
