"""The console's strip, token form, staleness, Purge confirmation, landmarks, dark mode and
chart, in a real headless Chromium against a real `soulflow run`, at 1280 and 375 px."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.browser.conftest import TOKEN
from tests.browser.test_console_page import (
    click,
    console_errors,
    event_texts,
    open_console,
    screenshot,
    until,
)
from tests.e2e.harness import wait_for

try:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
except ImportError:  # a skip, and under CI a failure (tests/conftest.py)
    pytest.skip("selenium is not installed (pip install -e '.[dev]')", allow_module_level=True)


def strip(driver: Any) -> list[tuple[str, str, str]]:
    return [(a.text, a.get_attribute("href").rsplit("#", 1)[-1], a.get_attribute("class"))
            for a in driver.find_elements(By.CSS_SELECTOR, "#strip a")]


def first_column(driver: Any) -> list[str]:
    return driver.execute_script(
        "return [...document.getElementById('col-a').children].map(s => s.id)")


def body_text(driver: Any) -> str:
    return str(driver.execute_script("return document.body.innerText"))


def test_strip_puts_what_needs_the_operator_first(browser, make_daemon, fake_llm) -> None:
    daemon = make_daemon()
    blocker = daemon.workspace / "runtime" / "local" / "broken.jsonl"
    blocker.mkdir(parents=True)  # replies to chat "broken" cannot be written: a dead letter
    daemon.start()
    open_console(browser, daemon)
    until(browser, lambda d: strip(d) and strip(d)[-1][0] == "model: phi4_local",
          what="the strip")
    assert [row[1] for row in strip(browser)] == \
        ["sec-approvals", "sec-dlq", "sec-channels", "sec-providers"]
    assert all("ok" in row[2] for row in strip(browser))
    assert first_column(browser)[:2] == ["sec-approvals", "sec-channels"]

    daemon.say("answer me", chat_id="broken")
    until(browser, lambda d: strip(d)[0][:2] == ("1 dead letter", "sec-dlq"),
          what="the dead letter first in the strip")
    assert first_column(browser)[0] == "sec-dlq"  # its section moved to the top
    fake_llm.script_tool_call("write_file", {"path": "notes/plan.txt", "content": "step 1"})
    # a named sender (its id is "operator"): the stream names them as the card does
    assert daemon.api("POST", "/api/chat", json={"chat_id": "planner", "text": "write my plan",
                                                 "sender": "Ada Lovelace"}).status_code == 202
    until(browser, lambda d: [r[0] for r in strip(d)[:2]] ==
          ["1 approval pending", "1 dead letter"], what="the approval first in the strip")
    assert first_column(browser)[:2] == ["sec-approvals", "sec-dlq"]
    assert all("bad" in row[2] for row in strip(browser)[:2])
    screenshot(browser, "console-strip", 375)
    screenshot(browser, "console-strip", 1280)

    # each is a link to its section: the keyboard follows it to the buttons
    click(browser, "#strip a[href='#sec-dlq']", "the dead-letter link")
    until(browser, lambda d: d.execute_script("return location.hash") == "#sec-dlq",
          what="the address at the section")
    assert browser.find_element(By.CSS_SELECTOR, "#dlq-out button.replay").is_displayed()
    # an inbound message's event names the sender as the approval card does
    assert "asked by Ada Lovelace in local:planner" in browser.find_element(By.ID, "approvals").text
    texts = event_texts(browser)
    assert any(t.startswith("↓") and "Ada Lovelace wrote in local:planner" in t
               for t in texts), texts
    assert console_errors(browser) == []


def test_strip_says_none_configured_without_a_model(browser, make_daemon) -> None:
    daemon = make_daemon(PROVIDER="", PHI4_BASE_URL="").start()
    open_console(browser, daemon)
    until(browser, lambda d: strip(d) and strip(d)[0][:2] == ("model: none configured",
                                                             "sec-providers"),
          what="the model, none configured, first")
    assert first_column(browser)[0] == "sec-providers"
    assert "No model provider is configured" in browser.find_element(By.ID, "providers").text


def test_token_form_and_address_token_work_without_a_reload(browser, make_daemon) -> None:
    daemon = make_daemon().start()
    browser.set_window_size(375, 900)
    browser.get(f"{daemon.url}/")
    browser.execute_script("sessionStorage.clear()")
    browser.get(f"{daemon.url}/")
    form = browser.find_element(By.ID, "token-form")
    until(browser, lambda d: form.is_displayed(), what="the token form")
    assert browser.find_element(By.ID, "conn").text == "token needed"
    assert not browser.find_element(By.ID, "main").is_displayed()
    assert "Authorization" not in body_text(browser)  # not "send a header" to a person
    assert browser.switch_to.active_element == browser.find_element(By.ID, "token-input")
    assert browser.execute_script(
        "return document.getElementById('token-input').labels[0].textContent") == \
        "Dashboard token"
    browser.execute_script("window.soulflowTestNoReload = true")

    browser.find_element(By.ID, "token-input").send_keys("not-the-token", Keys.ENTER)
    until(browser, lambda d: "refused" in d.find_element(By.ID, "token-note").text,
          what="the wrong token refused")
    browser.find_element(By.ID, "token-input").send_keys(TOKEN, Keys.ENTER)
    until(browser, lambda d: d.find_element(By.ID, "conn").text == "live", what="live")
    until(browser, lambda d: d.find_element(By.ID, "main").is_displayed(), what="the cards")
    assert not form.is_displayed()
    assert browser.execute_script("return window.soulflowTestNoReload") is True

    # a new tab without the token, then `#token=` added to the address: no F5 needed
    browser.execute_script("sessionStorage.clear()")
    browser.get(f"{daemon.url}/")
    until(browser, lambda d: d.find_element(By.ID, "token-form").is_displayed(),
          what="the token form again")
    browser.execute_script("window.soulflowTestNoReload = true")
    browser.get(f"{daemon.url}/#token={TOKEN}")  # same document: a hashchange, not a load
    until(browser, lambda d: d.find_element(By.ID, "conn").text == "live",
          what="live from the address's token")
    assert browser.execute_script("return window.soulflowTestNoReload") is True
    # the token left the address (and its history entry) at once, and went nowhere else
    assert TOKEN not in browser.current_url
    urls = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)")
    assert urls and not [u for u in urls if TOKEN in u]
    assert TOKEN not in daemon.log()
    assert console_errors(browser) == [] or all("401" in e for e in console_errors(browser))


def test_unreachable_daemon_greys_the_cards_and_says_since_when(browser, make_daemon) -> None:
    daemon = make_daemon().start()
    open_console(browser, daemon)
    stale = browser.find_element(By.ID, "stale")
    assert not stale.is_displayed()
    daemon.stop()
    until(browser, lambda d: stale.is_displayed(), what="the staleness note")
    assert "The daemon does not answer since" in stale.text
    assert "stale" in browser.find_element(By.ID, "main").get_attribute("class")
    opacity = browser.execute_script(
        "return getComputedStyle(document.getElementById('sec-channels')).opacity")
    assert float(opacity) < 1
    click(browser, "#chat-form button", "send with an empty box")  # nothing to send
    browser.find_element(By.ID, "chat-text").send_keys("are you there", Keys.ENTER)
    until(browser, lambda d: "The message was not sent" in d.find_element(By.ID, "problems").text,
          what="the failed send said")
    assert "Failed to fetch" not in body_text(browser)
    assert "the daemon does not answer" in browser.find_element(By.ID, "problems").text
    screenshot(browser, "console-stale", 375)
    screenshot(browser, "console-stale", 1280)
    daemon.start()
    until(browser, lambda d: not d.find_element(By.ID, "stale").is_displayed(), timeout=30,
          what="the note gone once the daemon answers")
    assert "stale" not in browser.find_element(By.ID, "main").get_attribute("class")


def test_purge_asks_first_and_keep_takes_it_back(browser, make_daemon) -> None:
    daemon = make_daemon()
    blocker = daemon.workspace / "runtime" / "local" / "broken.jsonl"
    blocker.mkdir(parents=True)
    daemon.start()
    open_console(browser, daemon)
    daemon.say("answer me", chat_id="broken")
    until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#dlq-out button.purge"),
          what="the dead letter")
    click(browser, "#dlq-out button.purge", "Purge")
    until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#dlq-out button.purge-confirm"),
          what="the confirmation")
    keep = browser.find_element(By.CSS_SELECTOR, "#dlq-out button.purge-keep")
    assert browser.switch_to.active_element == keep  # the safe choice has the focus
    assert daemon.state()["queues"]["dlq"] == 1
    ActionChains(browser).send_keys(Keys.ENTER).perform()  # Keep, by keyboard
    until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#dlq-out button.purge"),
          what="Purge back")
    assert daemon.state()["queues"]["dlq"] == 1
    click(browser, "#dlq-out button.purge", "Purge")
    click(browser, "#dlq-out button.purge-confirm", "Purge for good")
    wait_for(lambda: daemon.state()["queues"]["dlq"] == 0, what="the dead letter purged")
    until(browser, lambda d: "No undelivered message" in d.find_element(By.ID, "dlq-out").text,
          what="the DLQ empty on the page")
    assert console_errors(browser) == []


def test_landmarks_labels_dark_mode_and_chart(browser, make_daemon) -> None:
    daemon = make_daemon().start()
    open_console(browser, daemon)
    box = browser.find_element(By.ID, "chat-text")
    box.send_keys("one", Keys.ENTER)
    until(browser, lambda d: "echo: one" in d.find_element(By.ID, "chat-log").text,
          what="the reply")
    landmarks = browser.execute_script("""
        return ["header", "nav", "main"]
          .map(t => document.querySelectorAll("body > " + t).length)""")
    assert landmarks == [1, 1, 1]
    assert browser.find_element(By.ID, "strip").get_attribute("aria-label")
    unlabelled = browser.execute_script("""
        return [...document.querySelectorAll("section")].filter(s => {
          const h = document.getElementById(s.getAttribute("aria-labelledby") || "");
          return !h || !/^H[1-6]$/.test(h.tagName) || !h.textContent.trim();
        }).map(s => s.id)""")
    assert unlabelled == []
    assert browser.execute_script(
        "return document.getElementById('chat-text').labels[0].textContent") == \
        "Message to the agent"
    assert browser.execute_script("""return [...document.querySelectorAll('button')]
        .filter(b => !b.textContent.trim()).length""") == 0

    # in and out apart, named in the legend, and each minute's numbers on hover
    until(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#chart polyline.series")) == 2,
          what="two lines for the local channel")
    lines = browser.execute_script(
        "return [...document.querySelectorAll('#chart polyline.series')].map(p => p.dataset.key)")
    assert lines == ["local:in", "local:out"]
    until(browser, lambda d: "local out: 1 in the last hour" in
          d.find_element(By.CSS_SELECTOR, "#chart .legend").text, what="the reply counted")
    assert "local in: 1 in the last hour" in browser.find_element(By.CSS_SELECTOR,
                                                                  "#chart .legend").text
    tips = browser.execute_script(
        "return [...document.querySelectorAll('#chart rect.hover title')].map(t => t.textContent)")
    assert len(tips) == 60 and tips[-1] == "this minute: local 1 in, 1 out"
    assert tips[0].startswith("59 min ago: local 0 in, 0 out")
    dashed = browser.execute_script("""return getComputedStyle(
        document.querySelector('#chart polyline.out')).strokeDasharray""")
    assert dashed not in ("", "none")

    def background() -> list[int]:
        color = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
        return [int(part) for part in color[color.index("(") + 1:-1].split(",")[:3]]

    assert sum(background()) > 600  # light by default
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {
        "features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    try:
        until(browser, lambda d: sum(background()) < 120, what="the dark theme")
        ink = browser.execute_script("return getComputedStyle(document.body).color")
        assert sum(int(p) for p in ink[ink.index("(") + 1:-1].split(",")[:3]) > 600
        screenshot(browser, "console-dark", 1280)
        screenshot(browser, "console-dark", 375)
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    assert console_errors(browser) == []


def test_mcp_problems_are_shown_on_the_page(browser, make_daemon) -> None:
    """A bad mcp.json and an MCP server that cannot start are reported on the page, as in
    `soulflow status` and doctor (issue 21: crashes are reported on the page too)."""
    daemon = make_daemon()
    (daemon.workspace / "mcp.json").write_text('{"mcpServers": {"x": {"bogus": 1}}}')
    daemon.start()
    open_console(browser, daemon)
    until(browser, lambda d: "mcp.json not used" in d.find_element(By.ID, "problems").text,
          what="the bad mcp.json reported")
    assert "server 'x'" in browser.find_element(By.ID, "problems").text  # names the server
    daemon.stop()

    missing = daemon.workspace / "no-such-server"
    (daemon.workspace / "mcp.json").write_text(
        json.dumps({"mcpServers": {"broken": {"command": str(missing)}}}))
    daemon.start()
    open_console(browser, daemon)
    until(browser, lambda d: "MCP server broken is down" in
          d.find_element(By.ID, "problems").text, what="the server that cannot start reported")
    assert console_errors(browser) == []


def test_usage_card_names_people_beside_their_ids(browser, make_daemon, fake_llm) -> None:
    """Today's cost by source, chat and user, with each person's name beside their id."""
    fake_llm.cost_per_token = 0.0001
    daemon = make_daemon().start()
    fake_llm.script_reply("counted")
    assert daemon.api("POST", "/api/chat", json={"chat_id": "ledger", "text": "count me",
                                                 "sender": "Ada Lovelace"}).status_code == 202
    open_console(browser, daemon)
    until(browser, lambda d: "Ada Lovelace (local:operator)" in
          d.find_element(By.ID, "usage").text, what="the named person in the usage card")
    card = browser.find_element(By.ID, "usage").text
    assert "local:ledger" in card and "message" in card and "1 calls" in card
    assert console_errors(browser) == []
