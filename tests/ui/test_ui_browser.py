"""The memory browser (``ferrex ui``, issue 40) in a real browser: Debian's chromium driven by
Selenium against a real ``ferrex ui`` process on a real store.

The store is filled through the CLI while the UI runs (the CLI joins the UI's engine), and
two old events come from an import (their stored time in the past, so /review has stale
memories). The tests search, browse, open a fact and read its history, correct it, confirm
and forget from /review, switch namespaces, roll a procedure back, and check that requests
without the token, with a used token, with a foreign Host or Origin, or without the CSRF token
are refused. Each page is saved as a screenshot at 1280x800 and at a phone's 390x844
(``$FERREX_UI_SCREENSHOTS``, default ``bench/results/ui/``).

Skipped, visibly, when chromium, chromedriver or selenium is not installed (``.ci/run``
installs them with apt where it can).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.harness import ferrex_command
from tests.support.paths import ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
try:
    from selenium import webdriver
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:  # pragma: no cover - the test extra installs it
    webdriver = None  # type: ignore[assignment]

pytestmark = pytest.mark.skipif(
    webdriver is None or not CHROMIUM or not CHROMEDRIVER,
    reason="browser tests need chromium and chromedriver (apt-get install chromium "
    "chromium-driver) and selenium (pip install -e '.[test]')",
)

SHOTS = Path(os.environ.get("FERREX_UI_SCREENSHOTS") or ROOT / "bench" / "results" / "ui")
OLD = "2025-01-10T09:00:00Z"
STALE_A = "mem_0000000000000000000old0a"
STALE_B = "mem_0000000000000000000old0b"
EVENT = (
    "the nightly backup failed on node 3 because the disk filled up with old WAL segments "
    "that the retention job never removed; we added a cron job to prune them"
)


def _env(data: Path, models_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERREX_")}
    env.update(
        FERREX_HOME=str(data),
        FERREX_MODELS_DIR=str(models_dir),
        FERREX_OFFLINE="1",
        FERREX_LOG="warning",
        FERREX_RETRIEVAL__MIN_SCORE="0",
        FERREX_RETRIEVAL__ANSWER_GATE__RELEVANCE="0",
        FERREX_RETRIEVAL__ANSWER_GATE__COSINE="0",
    )
    return env


def _cli(env: dict[str, str], *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [ferrex_command(), "--model-tier", "small", *args, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, (done.stdout[-1000:], done.stderr[-1000:])
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def _old_events(path: Path) -> None:
    """An export file with two events stored long ago (stale, never confirmed)."""
    header = {"kind": "header", "format": "ferrex-export", "version": 1}
    records: list[dict[str, Any]] = [header]
    for memory_id, text in (
        (STALE_A, "the old build server ran jenkins 1.6 on a single vm"),
        (STALE_B, "a contractor once asked for the staging database password by email"),
    ):
        records.append(
            {
                "kind": "memory",
                "id": memory_id,
                "namespace": "default",
                "type": "episodic",
                "content": text,
                "created_at": OLD,
                "updated_at": OLD,
                "event_time": OLD,
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


class Ui:
    def __init__(self, url: str, env: dict[str, str], process: subprocess.Popen[str]) -> None:
        self.url = url
        self.base = url.split("/?")[0]
        self.token = url.split("token=")[1]
        self.env = env
        self.process = process
        self.ids: dict[str, str] = {}


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory, models_dir: Path) -> Iterator[Ui]:
    root = tmp_path_factory.mktemp("ui")
    env = _env(root / "data", models_dir)
    _old_events(root / "old.jsonl")
    for command in (["init"], ["import", str(root / "old.jsonl")]):
        done = subprocess.run(
            [ferrex_command(), "--model-tier", "small", *command],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stderr[-2000:]
    process = subprocess.Popen(
        [ferrex_command(), "--model-tier", "small", "ui", "--no-browser"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    first = process.stdout.readline().strip()
    assert first.startswith("ferrex ui: http://127.0.0.1:") and "?token=" in first, first
    running = Ui(first.removeprefix("ferrex ui: "), env, process)
    try:
        # Stored through the CLI while the UI owns the store (the CLI joins its engine).
        store = ["store"]
        ids = running.ids
        ids["event"] = _cli(env, *store, EVENT, "--timestamp", "2025-03-04T10:00:00Z")["id"]
        fact = ["--subject", "api", "--predicate", "uses"]
        ids["old_fact"] = _cli(
            env, *store, *fact, "--object", "postgres 14", "--t-valid", "2024-01-01T00:00:00Z"
        )["id"]
        ids["fact"] = _cli(env, *store, *fact, "--object", "postgres 16")["id"]
        deploy = ["--type", "procedural", "--name", "deploy"]
        ids["v1"] = _cli(env, *store, *deploy, "--step", "build", "--step", "push")["id"]
        ids["v2"] = _cli(
            env, *store, *deploy, "--step", "build", "--step", "run the tests", "--step", "push"
        )["id"]
        ids["team"] = _cli(env, *store, "standup moved to ten o'clock", "--namespace", "team")["id"]
        yield running
    finally:
        process.terminate()
        try:
            _, err = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
        # Nothing of the memories in the UI's log (stderr): no content, no query.
        for secret in ("nightly backup", "postgres", "standup", "jenkins"):
            assert secret not in err, err[-2000:]


@pytest.fixture(scope="module")
def browser(ui: Ui, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
        "--window-size=1280,800",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(120)
    _viewport(driver, 1280, 800)
    try:
        driver.get(ui.url)
        yield driver
    finally:
        driver.quit()


def _viewport(driver: Any, width: int, height: int) -> None:
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
    )


def _shot(driver: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for label, (width, height) in (("desktop", (1280, 800)), ("phone", (390, 844))):
        _viewport(driver, width, height)
        time.sleep(0.2)
        assert driver.save_screenshot(str(SHOTS / f"{name}-{label}.png"))
    _viewport(driver, 1280, 800)


def _text(driver: Any) -> str:
    text: str = driver.find_element(By.TAG_NAME, "body").text
    return text


def _session_cookie(driver: Any) -> dict[str, str]:
    name = _cookie_name(driver)
    return {name: driver.get_cookie(name)["value"]}


def _cookie_name(driver: Any) -> str:
    names = [c["name"] for c in driver.get_cookies() if c["name"].startswith("ferrex_ui_")]
    assert len(names) == 1, names
    return str(names[0])


def _wait_for(driver: Any, css: str) -> Any:
    try:
        return WebDriverWait(driver, 30).until(lambda d: d.find_element(By.CSS_SELECTOR, css))
    except TimeoutException:
        raise AssertionError(f"no {css} on {driver.current_url}:\n{_text(driver)[:3000]}") from None


def test_the_token_becomes_a_cookie_and_leaves_the_address_bar(browser: Any, ui: Ui) -> None:
    assert browser.current_url == ui.base + "/"  # the token is gone from the address
    cookie = browser.get_cookie(_cookie_name(browser))
    assert cookie["name"] == "ferrex_ui_" + ui.base.rsplit(":", 1)[1]  # one per server
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert browser.execute_script("return document.cookie") == ""  # scripts cannot read it
    assert "namespace" in _text(browser)


def test_search_shows_type_score_freshness_dates_and_why(browser: Any, ui: Ui) -> None:
    browser.get(ui.base + "/")
    box = browser.find_element(By.ID, "q")
    box.send_keys("why did the nightly backup fail?")
    box.submit()
    first = _wait_for(browser, "li.result")
    assert "nightly backup failed on node 3" in first.text
    assert "EPISODIC" in first.text.upper() and "fresh" in first.text
    assert "event 2025-03-04 10:00" in first.text and "stored " in first.text
    first.find_element(By.CSS_SELECTOR, "details.why summary").click()
    why = first.find_element(By.CSS_SELECTOR, "details.why").text
    assert "cosine" in why and "relevance" in why
    assert "q=why+did+the+nightly" in browser.current_url
    _shot(browser, "search")
    cookies = _session_cookie(browser)
    for bad, says in (("limit=abc", "whole number"), ("limit=0", "invalid_params")):
        refused = httpx.get(f"{ui.base}/?q=backup&{bad}", cookies=cookies)
        assert refused.status_code == 400 and says in refused.text, bad


def test_browse_filters_by_type_and_exports_the_view(browser: Any, ui: Ui) -> None:
    browser.get(ui.base + "/browse")
    rows = browser.find_elements(By.CSS_SELECTOR, "#memories tbody tr")
    assert len(rows) == 5  # event, current fact, procedure v2, two old events
    _shot(browser, "browse")
    Select(browser.find_element(By.NAME, "type")).select_by_value("semantic")
    browser.find_element(By.CSS_SELECTOR, ".filters-bar button").click()
    _wait_for(browser, "#memories")
    rows = browser.find_elements(By.CSS_SELECTOR, "#memories tbody tr")
    assert len(rows) == 1 and "api uses postgres 16" in rows[0].text
    export = browser.find_element(By.ID, "export").get_attribute("href")
    lines = httpx.get(export, cookies=_session_cookie(browser)).text.splitlines()
    assert [json.loads(line)["id"] for line in lines] == [ui.ids["fact"]]


def test_a_facts_history_and_its_correction(browser: Any, ui: Ui) -> None:
    browser.get(f"{ui.base}/memory/{ui.ids['fact']}")
    timeline = _wait_for(browser, "#timeline")
    entries = timeline.find_elements(By.TAG_NAME, "li")
    assert [e.find_element(By.TAG_NAME, "b").text for e in entries] == [
        "postgres 14",
        "postgres 16",
    ]
    assert "2024-01-01 →" in entries[0].text and "superseded by" in entries[0].text
    assert "→ now" in entries[1].text and "current" in entries[1].text
    _shot(browser, "fact-history")
    value = browser.find_element(By.ID, "object")
    value.clear()
    value.send_keys("postgres 17")
    browser.find_element(By.ID, "correct").click()
    flash = _wait_for(browser, ".flash.ok")
    new_id = browser.current_url.rsplit("/", 1)[1]
    assert f"corrected: the new value {new_id} supersedes {ui.ids['fact']}" in flash.text
    assert new_id != ui.ids["fact"]
    values = [b.text for b in browser.find_elements(By.CSS_SELECTOR, "#timeline li b")]
    assert values == ["postgres 14", "postgres 16", "postgres 17"]
    current = browser.find_elements(By.CSS_SELECTOR, "#timeline li.current")
    assert len(current) == 1 and "postgres 17" in current[0].text
    ui.ids["fact"] = new_id


def test_a_refused_correction_changes_nothing(browser: Any, ui: Ui) -> None:
    browser.get(f"{ui.base}/memory/{ui.ids['fact']}")
    value = browser.find_element(By.ID, "object")
    # Over the tools' field limit (2,000 characters), set at once (typing it is slow).
    browser.execute_script("arguments[0].value = arguments[1]", value, "x" * 2_500)
    browser.find_element(By.ID, "correct").click()
    flash = _wait_for(browser, ".flash.error")
    assert "not corrected" in flash.text
    values = [b.text for b in browser.find_elements(By.CSS_SELECTOR, "#timeline li b")]
    assert values == ["postgres 14", "postgres 16", "postgres 17"]


def test_a_procedures_versions_side_by_side_and_rollback(browser: Any, ui: Ui) -> None:
    browser.get(f"{ui.base}/memory/{ui.ids['v2']}")
    versions = browser.find_elements(By.CSS_SELECTOR, ".versions .version")
    assert len(versions) == 2 and "run the tests" in versions[1].text
    _shot(browser, "procedure")
    versions[0].find_element(By.TAG_NAME, "button").click()
    assert "restored version 1" in _wait_for(browser, ".flash.ok").text
    versions = browser.find_elements(By.CSS_SELECTOR, ".versions .version")
    assert len(versions) == 3 and "run the tests" not in versions[2].text


def test_review_confirms_and_forgets_with_a_confirmation(browser: Any, ui: Ui) -> None:
    browser.get(ui.base + "/review")
    section = _wait_for(browser, "#needs-review")
    assert STALE_A in section.get_attribute("innerHTML")
    assert STALE_B in section.get_attribute("innerHTML")
    _shot(browser, "review")
    section.find_element(By.CSS_SELECTOR, f"input[value='{STALE_A}']").click()
    browser.find_element(By.ID, "review-confirm").click()
    assert "confirmed 1" in _wait_for(browser, ".flash.ok").text
    section = _wait_for(browser, "#needs-review")
    section.find_element(By.CSS_SELECTOR, f"input[value='{STALE_B}']").click()
    browser.find_element(By.ID, "review-forget").click()
    confirm = _wait_for(browser, "#confirm-forget")
    assert "contractor once asked" in _text(browser)  # what will go, shown before it goes
    _shot(browser, "forget-confirm")
    confirm.click()
    assert "forgot 1" in _wait_for(browser, ".flash.ok").text
    cookies = _session_cookie(browser)
    gone = httpx.get(f"{ui.base}/memory/{STALE_B}", cookies=cookies)
    assert gone.status_code == 404 and "not_found" in gone.text
    kept = httpx.get(f"{ui.base}/memory/{STALE_A}", cookies=cookies)
    assert kept.status_code == 200 and "last_validated" in kept.text


def test_stats_draws_counts_staleness_and_growth(browser: Any, ui: Ui) -> None:
    browser.get(ui.base + "/stats")
    types = _wait_for(browser, "#chart-types").text
    assert "episodic" in types and "semantic" in types and "procedural" in types
    assert browser.find_elements(By.CSS_SELECTOR, "#chart-growth rect")
    months = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#chart-growth text.lab")]
    assert months[0] == "25-01" and len(months) >= 2  # from the old events' month on
    _shot(browser, "stats")
    _viewport(browser, 390, 844)  # the chart on a phone: full size, scrolled sideways
    chart = browser.find_element(By.ID, "chart-growth")
    browser.execute_script("arguments[0].scrollIntoView()", chart)
    assert chart.size["height"] >= 140
    assert chart.find_element(By.XPATH, "..").screenshot(str(SHOTS / "stats-growth-phone.png"))
    _viewport(browser, 1280, 800)


def test_switching_namespaces(browser: Any, ui: Ui) -> None:
    browser.get(ui.base + "/browse")
    Select(browser.find_element(By.ID, "ns")).select_by_value("team")  # submits on change
    WebDriverWait(browser, 60).until(lambda d: "standup moved to ten" in _text(d))
    assert "nightly backup" not in _text(browser)
    browser.get(ui.base + "/")  # the choice stays for the session's other pages
    selected = Select(browser.find_element(By.ID, "ns")).first_selected_option
    assert selected.get_attribute("value") == "team"
    Select(browser.find_element(By.ID, "ns")).select_by_value("default")
    WebDriverWait(browser, 60).until(
        lambda d: Select(d.find_element(By.ID, "ns")).first_selected_option.text == "default"
    )


def test_requests_without_the_token_or_from_elsewhere_are_refused(browser: Any, ui: Ui) -> None:
    cookies = _session_cookie(browser)
    assert httpx.get(ui.base + "/").status_code == 401
    assert (
        httpx.get(ui.base + "/browse", cookies={_cookie_name(browser): "forged"}).status_code == 401
    )
    assert httpx.get(f"{ui.base}/?token=wrong").status_code == 401
    assert httpx.get(f"{ui.base}/?token={ui.token}").status_code == 401  # used once already
    rebinding = httpx.get(ui.base + "/", cookies=cookies, headers={"Host": "evil.example:80"})
    assert rebinding.status_code == 403
    target = {"ids": ui.ids["event"], "action": "forget", "confirmed": "yes"}
    no_csrf = httpx.post(ui.base + "/act", cookies=cookies, data=target)
    assert no_csrf.status_code == 403
    csrf = browser.find_element(By.NAME, "csrf") if browser.find_elements(By.NAME, "csrf") else None
    if csrf is None:
        browser.get(f"{ui.base}/memory/{ui.ids['event']}")
        csrf = browser.find_element(By.NAME, "csrf")
    token = csrf.get_attribute("value")
    foreign = httpx.post(
        ui.base + "/act",
        cookies=cookies,
        data={**target, "csrf": token},
        headers={"Origin": "http://evil.example"},
    )
    assert foreign.status_code == 403
    still = httpx.get(f"{ui.base}/memory/{ui.ids['event']}", cookies=cookies)
    assert still.status_code == 200  # nothing was forgotten by the refused requests
