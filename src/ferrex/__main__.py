"""`python -m ferrex` is the same as the `ferrex` command."""

from ferrex.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
