"""The memory browser's small parts at their boundaries: the token exchange (once, in constant
time), the hosts a loopback server answers to, the chart scaling, and ``ferrex ui --host``
refused without a configured token."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.harness import ferrex_command

from ferrex.ui.charts import bars, stacked
from ferrex.ui.security import MAX_SESSIONS, Access, allowed_hosts, csrf_ok


def test_a_generated_token_logs_in_once_a_configured_one_each_time() -> None:
    hosts = allowed_hosts("127.0.0.1", 8700)
    once = Access("t" * 40, hosts, "default")
    assert once.exchange("wrong") is None and not once.used
    sid = once.exchange("t" * 40)
    assert sid is not None and once.session(sid) is not None
    assert once.exchange("t" * 40) is None  # used
    assert once.session("forged") is None and once.session(None) is None
    many = Access("s" * 40, hosts, "work", reusable=True)
    first, second = many.exchange("s" * 40), many.exchange("s" * 40)
    assert first and second and first != second
    session = many.session(second)
    assert session is not None and session.namespace == "work"
    assert csrf_ok(session, session.csrf) and not csrf_ok(session, "") and not csrf_ok(None, "x")


def test_sessions_are_bounded_the_oldest_goes() -> None:
    access = Access("k" * 40, allowed_hosts("127.0.0.1", 1), "default", reusable=True)
    sids = [access.exchange("k" * 40) for _ in range(MAX_SESSIONS + 1)]
    assert len(access.sessions) == MAX_SESSIONS
    assert access.session(sids[0]) is None and access.session(sids[-1]) is not None


def test_the_hosts_a_loopback_server_answers_to() -> None:
    access = Access("x" * 40, allowed_hosts("127.0.0.1", 8700), "default")
    for host in ("127.0.0.1:8700", "localhost:8700", "LOCALHOST:8700", "[::1]:8700"):
        assert access.host_allowed(host), host
    for host in ("127.0.0.1", "127.0.0.1:8701", "evil.example:8700", "", "127.0.0.1.nip.io:8700"):
        assert not access.host_allowed(host), host
    here = "127.0.0.1:8700"
    assert access.origin_allowed("http://127.0.0.1:8700", here)
    assert access.origin_allowed("http://localhost:8700", "localhost:8700")
    assert not access.origin_allowed("null", here)
    assert not access.origin_allowed("https://127.0.0.1:8700", here)
    assert not access.origin_allowed("http://evil.example:8700", here)
    assert not access.origin_allowed("http://localhost:8700", here)  # another origin
    assert allowed_hosts("10.0.0.5", 80) == frozenset({"10.0.0.5:80"})
    anywhere = Access("x" * 40, allowed_hosts("0.0.0.0", 80), "default", reusable=True)
    assert anywhere.host_allowed("192.168.1.9:80") and not anywhere.host_allowed("")


def test_bars_and_stacked_columns_scale_to_the_largest() -> None:
    assert [b.share for b in bars({}, ["a", "b"])] == [0.0, 0.0]
    scaled = bars({"a": 2, "b": 4, "zzz": 9}, ["a", "b", "c"])
    assert [(b.label, b.value, b.share) for b in scaled] == [
        ("a", 2, 0.5),
        ("b", 4, 1.0),
        ("c", 0, 0.0),
    ]
    assert stacked([], {}, ["x"]) == []
    columns = stacked(["m1", "m2"], {"x": [1, 0], "y": [3, 2]}, ["x", "y"])
    assert [c.total for c in columns] == [4, 2]
    first = columns[0].segments
    assert [(s.kind, s.start, s.share) for s in first] == [("x", 0.0, 0.25), ("y", 0.25, 0.75)]
    assert columns[1].segments[1].start == 0.0 and columns[1].segments[1].share == 0.5


def test_another_interface_needs_a_configured_token(tmp_path: Path, models_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERREX_")}
    env.update(
        FERREX_HOME=str(tmp_path / "d"), FERREX_MODELS_DIR=str(models_dir), FERREX_OFFLINE="1"
    )
    command = [ferrex_command(), "--model-tier", "small"]
    subprocess.run([*command, "init"], env=env, check=True, capture_output=True, timeout=180)
    done = subprocess.run(
        [*command, "ui", "--no-browser", "--host", "0.0.0.0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert "without a configured token: set FERREX_HTTP_TOKEN" in done.stderr


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_team_server_serves_the_browser_under_ui_behind_its_token(
    tmp_path: Path, models_dir: Path
) -> None:
    import re
    import time

    import httpx

    token = "team-token-0123456789abcdef"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERREX_")}
    env.update(
        FERREX_HOME=str(tmp_path / "d"),
        FERREX_MODELS_DIR=str(models_dir),
        FERREX_OFFLINE="1",
        FERREX_HTTP_TOKEN=token,
    )
    command = [ferrex_command(), "--model-tier", "small"]
    stored = subprocess.run(
        [*command, "store", "the team server also serves the browser", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    memory_id = stored.stdout.split('"id": "')[1].split('"')[0]
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [*command, "serve", "--http", f"127.0.0.1:{port}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(base + "/ui/").status_code == 401:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and server.poll() is None
            time.sleep(0.3)
        assert httpx.post(base + "/mcp", json={}).status_code == 401  # MCP keeps its bearer
        assert httpx.get(f"{base}/ui/?token=wrong").status_code == 401
        with httpx.Client(base_url=base, follow_redirects=True) as browser:
            login = browser.get(f"/ui/?token={token}")  # follows the redirect to /ui/
            assert login.status_code == 200 and str(login.url) == f"{base}/ui/"
            assert "HttpOnly" in login.history[0].headers["set-cookie"]
            page = browser.get(f"/ui/memory/{memory_id}")
            assert page.status_code == 200 and "also serves the browser" in page.text
            assert 'href="/ui/browse"' in page.text and 'src="/ui/static/ui.js"' in page.text
            csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
            assert csrf is not None
            form = {"ids": memory_id, "action": "pin", "back": f"/ui/memory/{memory_id}"}
            assert browser.post("/ui/act", data=form).status_code == 403  # no CSRF token
            pinned = browser.post("/ui/act", data={**form, "csrf": csrf.group(1)})
            assert pinned.status_code == 200 and "pinned 1" in pinned.text
            assert str(pinned.url) == f"{base}/ui/memory/{memory_id}"
        # The token is the team's: it logs a second person in too.
        assert httpx.get(f"{base}/ui/?token={token}").status_code == 303
    finally:
        server.terminate()
        _, err = server.communicate(timeout=60)
    assert "also serves the browser" not in err
