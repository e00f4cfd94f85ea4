"""The console page in a real headless Chromium against a real `soulflow run`.

What a person does: open the page (with the token in the URL's fragment), watch a message
arrive live, approve a tool call, replay a dead letter once its cause is fixed, pause a cron
job, and keep watching across a daemon restart. Screenshots land in tests/artifacts/.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.browser.conftest import ARTIFACTS, TOKEN
from tests.e2e.harness import Daemon, wait_for

try:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # a skip, and under CI a failure (tests/conftest.py)
    pytest.skip("selenium is not installed (pip install -e '.[dev]')", allow_module_level=True)

SEVERE = "SEVERE"


def until(driver: Any, check: Callable[[Any], Any], timeout: float = 15.0,
          what: str = "the page") -> Any:
    """Wait for `check(driver)`; stale elements (the page re-rendered) just mean "again"."""
    return WebDriverWait(driver, timeout, poll_frequency=0.05,
                         ignored_exceptions=(StaleElementReferenceException,)).until(
        check, message=f"timed out waiting for {what}")


def open_console(driver: Any, daemon: Daemon) -> None:
    driver.set_window_size(1280, 1000)
    driver.get(f"{daemon.url}/#token={TOKEN}")
    until(driver, lambda d: d.find_element(By.ID, "conn").text == "live", what="the live pill")
    driver.get_log("browser")  # start the error check from here


def console_errors(driver: Any) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser")
            if entry.get("level") == SEVERE]


def event_texts(driver: Any) -> list[str]:
    return [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#events li")]


def click(driver: Any, selector: str, what: str) -> None:
    """Find and click in one step: a button found a moment ago may be gone (its row decided
    or its meaning changed, Pause to Resume) by the time it is clicked."""
    def press(d: Any) -> bool:
        d.find_element(By.CSS_SELECTOR, selector).click()
        return True
    until(driver, press, what=what)


def screenshot(driver: Any, name: str, width: int) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    driver.set_window_size(width, 1000)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, min(int(height) + 120, 4000))
    until(driver, lambda d: d.execute_script("""
        const box = document.getElementById("chart"), svg = box.querySelector("svg");
        return svg && svg.viewBox.baseVal.width === Math.max(280, Math.round(box.clientWidth));
        """), what="the chart redrawn at the new width")
    driver.execute_script("window.scrollTo(0, 0)")
    assert driver.save_screenshot(str(ARTIFACTS / f"{name}-{width}.png"))
    wide = driver.execute_script("""
        const limit = document.documentElement.clientWidth;
        return [...document.querySelectorAll("body *")]
          .filter(e => e.getBoundingClientRect().right > limit + 0.5)
          .map(e => e.tagName + "#" + e.id + "." + e.className + " " +
                    Math.round(e.getBoundingClientRect().right)).slice(0, 5);""")
    assert wide == [], f"the page scrolls sideways at {width} px: {wide}"


def test_page_loads_clean_and_shows_a_message_live(browser, make_daemon) -> None:
    daemon = make_daemon().start()
    open_console(browser, daemon)
    assert "SoulFlow" in browser.title
    # typed in the page's chat: the reply comes back in the chat log
    box = browser.find_element(By.ID, "chat-text")
    box.send_keys("hello from the browser", Keys.ENTER)
    until(browser, lambda d: "echo: hello from the browser" in
          d.find_element(By.ID, "chat-log").text, what="the reply in the chat log")
    # a message on another local chat arrives through the event stream within a second
    daemon.say("<img src=x onerror=alert(1)> is just text", chat_id="elsewhere")
    until(browser, lambda d: any("<img src=x onerror=alert(1)> is just text" in t
                                 for t in event_texts(d)), timeout=1.0,
          what="the live event for the new message")
    assert browser.find_elements(By.CSS_SELECTOR, "#events img") == []  # text, not markup
    assert any(t.startswith("↓") and "wrote in local:elsewhere" in t
               for t in event_texts(browser))
    until(browser, lambda d: "2 in / 2 out this hour" in d.find_element(By.ID, "channels").text,
          what="the channel's counts, from the state re-read after the events")
    assert "2 calls" in browser.find_element(By.ID, "providers").text
    assert browser.find_elements(By.CSS_SELECTOR, "#chart svg polyline")
    assert console_errors(browser) == []
    screenshot(browser, "console-chat", 1280)
    screenshot(browser, "console-chat", 375)
    assert console_errors(browser) == []


def test_approve_replay_and_pause_with_clicks(browser, make_daemon, fake_llm) -> None:
    daemon = make_daemon()
    blocker = daemon.workspace / "runtime" / "local" / "broken.jsonl"
    blocker.mkdir(parents=True)  # replies to chat "broken" cannot be written: a dead letter
    daemon.start()
    open_console(browser, daemon)
    assert "Nothing waits for a decision" in browser.find_element(By.ID, "approvals").text
    assert "No undelivered message" in browser.find_element(By.ID, "dlq-out").text

    daemon.say("answer me", chat_id="broken")  # answered by the fake's echo, then dead
    wait_for(lambda: daemon.state()["queues"]["dlq"] == 1, what="the dead letter")
    fake_llm.script_tool_call("write_file", {"path": "notes/plan.txt", "content": "step 1"})
    fake_llm.script_reply("Saved your plan.")
    daemon.say("write my plan", chat_id="planner")
    job = daemon.api("POST", "/api/cron/add", json={
        "name": "standup", "text": "standup time", "chat": "local:crew",
        "schedule": {"kind": "every", "every_s": 3600}}).json()["job"]
    until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#approvals button.approve"),
          what="the approval card")
    until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#dlq-out button.replay"),
          what="the dead letter")
    until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#cron button.cron-pause"),
          what="the cron job")
    card = browser.find_element(By.ID, "approvals").text
    assert "write_file" in card and "notes/plan.txt" in card
    assert "asked by operator in local:planner, just now" in card  # who, where, since when
    screenshot(browser, "console-busy", 1280)
    screenshot(browser, "console-busy", 375)
    browser.set_window_size(1280, 1000)

    click(browser, "#approvals button.approve", "the approve button")
    wait_for(lambda: (daemon.workspace / "notes" / "plan.txt").exists(), what="the tool ran")
    wait_for(lambda: any(m["content"] == "Saved your plan." for m in daemon.replies("planner")),
             what="the run's answer")
    until(browser, lambda d: "Nothing waits" in d.find_element(By.ID, "approvals").text,
          what="the approval gone from the page")

    blocker.rmdir()  # the operator fixed the cause
    click(browser, "#dlq-out button.replay", "the replay button")
    wait_for(lambda: any(m["content"] == "echo: answer me" for m in daemon.replies("broken")),
             what="the replayed reply delivered")
    until(browser, lambda d: "No undelivered message" in d.find_element(By.ID, "dlq-out").text,
          what="the DLQ empty on the page")

    click(browser, "#cron button.cron-pause", "the pause button")
    until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#cron button.cron-resume"),
          what="the resume button")
    jobs = daemon.api("GET", "/api/cron").json()["jobs"]
    assert [(j["id"], j["enabled"]) for j in jobs] == [(job["id"], False)]
    texts = event_texts(browser)
    assert any("approved" in t and "write_file" in t for t in texts)
    assert any("replayed dead letter" in t for t in texts)
    assert any("paused cron job" in t for t in texts)
    assert console_errors(browser) == []
    screenshot(browser, "console-after-actions", 1280)


def test_page_survives_a_daemon_restart(browser, make_daemon) -> None:
    daemon = make_daemon().start()
    open_console(browser, daemon)
    daemon.stop()
    until(browser, lambda d: d.find_element(By.ID, "conn").text == "reconnecting…",
          what="the page noticing the daemon is gone")
    daemon.start()
    until(browser, lambda d: d.find_element(By.ID, "conn").text == "live", timeout=30,
          what="the page reconnected")
    daemon.say("after the restart", chat_id="again")
    until(browser, lambda d: any("after the restart" in t for t in event_texts(d)),
          what="a live event after the restart")
    # the browser logs the dropped connection as a network error; nothing else may fail
    errors = [e for e in console_errors(browser) if "/api/" not in e]
    assert errors == []
