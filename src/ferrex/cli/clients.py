"""``ferrex config claude-desktop`` / ``ferrex config claude-code``: the MCP client entry that
starts this ferrex (its real path, the flags given), printed as JSON or merged into the client's
config file with a backup of the previous one."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

CLIENTS = ("claude-desktop", "claude-code")
SECRET_ENV = {"qdrant_api_key": "QDRANT_API_KEY"}


class ClientConfigError(Exception):
    """The client's config file cannot be used (message says what to do)."""


def ferrex_executable() -> str:
    """The absolute path of this ferrex's console script (what the client must start)."""
    beside = Path(sys.executable).parent / ("ferrex.exe" if os.name == "nt" else "ferrex")
    if beside.is_file():
        return str(beside.absolute())
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is not None and argv0.name.startswith("ferrex") and argv0.is_file():
        return str(argv0.absolute())
    found = shutil.which("ferrex")
    if found:
        return str(Path(found).absolute())
    return str(beside.absolute())  # pragma: no cover - ferrex always runs from a script


def desktop_config_path(platform: str | None = None, environ: dict[str, str] | None = None) -> Path:
    """Where Claude Desktop reads its MCP servers on this OS."""
    platform = platform or sys.platform
    env = os.environ if environ is None else environ
    home = Path(env.get("HOME") or Path.home())
    if platform == "darwin":
        base = home / "Library" / "Application Support"
    elif platform.startswith("win"):
        base = Path(env.get("APPDATA") or home / "AppData" / "Roaming")
    else:
        base = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    return base / "Claude" / "claude_desktop_config.json"


def code_config_path(scope: str, environ: dict[str, str] | None = None) -> Path:
    """Claude Code: ``~/.claude.json`` (user scope) or ``./.mcp.json`` (project scope)."""
    env = os.environ if environ is None else environ
    if scope == "project":
        return Path.cwd() / ".mcp.json"
    return Path(env.get("HOME") or Path.home()) / ".claude.json"


def server_entry(client: str, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    entry: dict[str, Any] = {"command": ferrex_executable(), "args": args}
    if client == "claude-code":
        entry = {"type": "stdio", **entry}
    if env or client == "claude-code":
        entry["env"] = env
    return entry


def claude_code_command(name: str, scope: str, entry: dict[str, Any]) -> str:
    """The equivalent ``claude mcp add`` line, every word quoted for POSIX shells and zsh."""
    words = ["claude", "mcp", "add", "--scope", scope]
    for key, value in entry.get("env", {}).items():
        words += ["-e", f"{key}={value}"]
    words += [name, "--", entry["command"], *entry["args"]]
    return " ".join(shlex.quote(word) for word in words)


def merge_into(path: Path, name: str, entry: dict[str, Any]) -> Path | None:
    """Put ``entry`` under ``mcpServers.<name>`` of the JSON file at ``path``, keeping every
    other key; the previous file is copied to ``<file>.bak-<UTC time>`` first. Returns the
    backup's path (None when there was no file yet)."""
    data: dict[str, Any] = {}
    backup: Path | None = None
    if path.exists():
        try:
            text = path.read_text(encoding="utf-8")
            loaded = json.loads(text) if text.strip() else {}
        except (OSError, UnicodeDecodeError) as exc:
            raise ClientConfigError(f"cannot read {path}: {exc}") from None
        except json.JSONDecodeError as exc:
            raise ClientConfigError(
                f"{path} is not valid JSON ({exc.msg}, line {exc.lineno}); fix or move it, "
                "then run this again (nothing was changed)"
            ) from None
        if not isinstance(loaded, dict):
            raise ClientConfigError(f"{path} does not hold a JSON object; nothing was changed")
        data = loaded
        if "mcpServers" in data and not isinstance(data["mcpServers"], dict):
            raise ClientConfigError(f"'mcpServers' in {path} is not an object; nothing was changed")
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        backup = path.with_name(f"{path.name}.bak-{stamp}")
        shutil.copy2(path, backup)
    servers = dict(data.get("mcpServers") or {})
    servers[name] = entry
    data["mcpServers"] = servers
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.ferrex-tmp")
    temporary.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if backup is not None:
        shutil.copymode(backup, temporary)
    else:
        os.chmod(temporary, 0o600)  # it may come to hold an API key
    temporary.replace(path)
    return backup


def run_config(
    client: str,
    serve_args: list[str],
    env: dict[str, str],
    *,
    name: str,
    write: bool,
    scope: str,
    file: str | None,
) -> int:
    entry = server_entry(client, serve_args, env)
    snippet = {"mcpServers": {name: entry}}
    sys.stdout.write(json.dumps(snippet, indent=2, ensure_ascii=False) + "\n")
    if client == "claude-desktop":
        target = Path(file).expanduser() if file else desktop_config_path()
    else:
        target = Path(file).expanduser() if file else code_config_path(scope)
    if not write:
        where = (
            f"merge it into {target}"
            if client == "claude-desktop"
            else (f"run: {claude_code_command(name, scope, entry)}")
        )
        sys.stderr.write(f"{where}\n(or run this command again with --write)\n")
        return 0
    try:
        backup = merge_into(target, name, entry)
    except ClientConfigError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    except OSError as exc:
        sys.stderr.write(f"error: cannot write {target} ({exc.strerror or exc}); nothing changed\n")
        return 1
    kept = f"; the previous file is kept as {backup}" if backup else ""
    restart = (
        "restart Claude Desktop" if client == "claude-desktop" else "start a new claude session"
    )
    sys.stderr.write(f"wrote the '{name}' server into {target}{kept}; {restart} to use it\n")
    return 0
