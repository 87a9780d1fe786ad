"""What the agent pays: answer and tool-list sizes through a real MCP stdio client.

    python bench/answers.py                  # this checkout
    python bench/answers.py --src OTHER/src  # another checkout's code (e.g. a worktree of an
                                             # older commit), for before / after rows

The scenario is tests/server/test_lean_answers.py's: a fresh store gets two episodes, a fact and its
replacement, and a procedure; then one recall of mixed types (5 results, history included),
``stats``, ``stats detailed``, ``reflect`` and ``forget``. Sizes are characters of the text
content the model reads (the JSON answer), and of ``tools/list`` as the model sees it (name,
description, input schema per tool, compact JSON). "Per result beyond content" is the recall
answer's length minus its results' content strings, divided by the number of results.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent


def params(src: Path, data_dir: Path) -> StdioServerParameters:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("FERREX_")},
        "FERREX_HOME": str(data_dir),
        "FERREX_OFFLINE": "1",
        "FERREX_LOG": "error",
        "PYTHONPATH": str(src),
    }
    command = Path(sys.executable).with_name("ferrex")
    return StdioServerParameters(
        command=str(command), args=["--model-tier", "small", "--no-rerank"], env=env
    )


def text_of(result: Any) -> str:
    if result.is_error:
        raise RuntimeError(f"tool error: {result.content}")
    return str(result.content[0].text)


async def measure(src: Path) -> dict[str, Any]:
    last_week = (datetime.now(UTC) - timedelta(days=7)).strftime("%Y-%m-%dT%H:%M:%SZ")
    sizes: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ferrex-answers-") as tmp:
        async with Client(params(src, Path(tmp) / "d"), mode="legacy") as client:
            listed = await client.list_tools()
            view = [
                {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
                for t in listed.tools
            ]
            sizes["tools/list"] = len(json.dumps(view, ensure_ascii=False, separators=(",", ":")))
            stores = [
                {
                    "content": "the billing service deploy failed because the payments database "
                    "migration locked the invoices table",
                    "timestamp": last_week,
                    "entities": ["billing service", "payments database"],
                },
                {"content": "rolled the billing service back and re-ran the migration at night"},
                {"subject": "billing service", "predicate": "database", "object": "mysql 8"},
                {"subject": "billing service", "predicate": "database", "object": "postgres 16"},
                {
                    "type": "procedural",
                    "name": "deploy-billing",
                    "steps": ["run the database migration", "deploy the billing service"],
                },
            ]
            store_sizes = []
            first_id = None
            for arguments in stores:
                text = text_of(await client.call_tool("store", arguments))
                store_sizes.append(len(text))
                first_id = first_id or json.loads(text).get("id")
            sizes["store (mean)"] = round(sum(store_sizes) / len(store_sizes))
            text = text_of(
                await client.call_tool(
                    "recall",
                    {"query": "billing service database deploy", "include_invalidated": True},
                )
            )
            results = json.loads(text)["results"]
            content = sum(len(json.dumps(r["content"], ensure_ascii=False)) for r in results)
            sizes["recall"] = len(text)
            sizes["recall results"] = len(results)
            sizes["recall per result beyond content"] = (
                round((len(text) - content) / len(results)) if results else None
            )
            sizes["stats"] = len(text_of(await client.call_tool("stats", {})))
            detailed = await client.call_tool("stats", {"detailed": True})
            sizes["stats detailed"] = len(text_of(detailed))
            sizes["reflect"] = len(text_of(await client.call_tool("reflect", {})))
            sizes["forget"] = len(text_of(await client.call_tool("forget", {"ids": [first_id]})))
    return sizes


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the code to serve")
    parser.add_argument("--label", default=None)
    args = parser.parse_args()
    sizes = asyncio.run(measure(args.src.resolve()))
    label = args.label or str(args.src)
    print("| code | " + " | ".join(sizes) + " |")
    print("|---" * (len(sizes) + 1) + "|")
    print(
        f"| {label} | " + " | ".join("—" if v is None else f"{v:,}" for v in sizes.values()) + " |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
