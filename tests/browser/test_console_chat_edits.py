"""A streamed reply in the console's chat, in a real Chromium against a real `soulflow run`:
one bubble whose text is replaced in place as edits arrive, and one bubble per reply after a
reload. The edits are written into the transcript as the local channel writes them (its own
record format) while the daemon is stopped, which is how a reply edited across a restart
reaches the page: the page's long poll resumes and patches the bubble it shows."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser.test_console_page import console_errors, open_console, until

try:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
except ImportError:  # a skip, and under CI a failure (tests/conftest.py)
    pytest.skip("selenium is not installed (pip install -e '.[dev]')", allow_module_level=True)


def write(path: Path, records: list[dict[str, Any]]) -> None:
    """Append transcript records as LocalChannel._append writes them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps({"at": time.time(), **record}) + "\n")


FILLER = [{"seq": i, "id": f"old-{i}", "role": "assistant" if i % 2 else "user",
           "content": f"earlier {i}"} for i in range(40)]


def bubbles(driver: Any) -> list[tuple[str, str]]:
    """The chat log's bubbles after the 40 earlier ones."""
    return [tuple(b) for b in driver.execute_script("""
        return [...document.querySelectorAll("#chat-log .msg")].slice(40)
          .map(m => [m.classList.contains("user") ? "user" : "assistant", m.textContent])""")]


def test_a_streamed_reply_is_one_bubble_edited_in_place(browser, make_daemon) -> None:
    daemon = make_daemon()
    transcript = daemon.workspace / "runtime" / "local" / "dashboard.jsonl"
    write(transcript, [
        *FILLER,
        {"seq": 40, "id": "in-1", "role": "user", "content": "tell me a story"},
        {"seq": 41, "id": "out-1", "role": "assistant", "content": "Once", "reply_to": "in-1"},
        {"seq": 42, "id": "e-1", "role": "assistant", "content": "Once upon",
         "edits": "out-1", "reply_to": "in-1"},
        {"seq": 43, "id": "e-2", "role": "assistant", "content": "Once upon a <b>time</b>",
         "edits": "out-1", "reply_to": "in-1"},
    ])
    daemon.start()
    open_console(browser, daemon)
    until(browser, lambda d: bubbles(d) == [("user", "tell me a story"),
                                            ("assistant", "Once upon a <b>time</b>")],
          what="the streamed reply shown once, with its latest text")
    assert browser.find_elements(By.CSS_SELECTOR, "#chat-log b") == []  # text, not markup
    probe = "#chat-log .msg.assistant:nth-last-child(1) span"
    browser.execute_script(f"document.querySelector('{probe}').dataset.probe = 'kept'")
    log_top = "return document.getElementById('chat-log').scrollTop"
    assert browser.execute_script(log_top) > 0  # it follows the newest message
    browser.execute_script("document.getElementById('chat-log').scrollTop = 0")  # reading back

    # more of the stream, and an edit of a reply older than anything on the page
    daemon.stop()
    write(transcript, [
        {"seq": 44, "id": "e-3", "role": "assistant", "content": "Once upon a time, the end.",
         "edits": "out-1", "reply_to": "in-1"},
        {"seq": 45, "id": "e-4", "role": "assistant", "content": "From before",
         "edits": "out-gone", "reply_to": "in-0"},
        {"seq": 46, "id": "e-5", "role": "assistant", "content": "From before the reload.",
         "edits": "out-gone", "reply_to": "in-0"},
        {"seq": 47, "id": "e-6", "role": "assistant", "content": "not the user's words",
         "edits": "in-1", "reply_to": "in-1"},
    ])
    daemon.start()
    expected = [("user", "tell me a story"), ("assistant", "Once upon a time, the end."),
                ("assistant", "From before the reload."), ("assistant", "not the user's words")]
    until(browser, lambda d: bubbles(d) == expected, timeout=30,
          what="the bubble patched in place after the daemon came back")
    assert browser.execute_script("""return document.querySelector(
        '#chat-log .msg.assistant span[data-probe="kept"]')?.textContent""") == \
        "Once upon a time, the end."  # the same node: replaced in place, not redrawn
    assert browser.execute_script(log_top) == 0  # the reader was left where they were

    # an ordinary exchange still adds bubbles
    browser.find_element(By.ID, "chat-text").send_keys("and then?", Keys.ENTER)
    expected += [("user", "and then?"), ("assistant", "echo: and then?")]
    until(browser, lambda d: bubbles(d) == expected, what="the new exchange")
    assert browser.execute_script(log_top) > 0  # what the operator sent is shown

    # a reload shows each reply once, with its final text
    open_console(browser, daemon)
    until(browser, lambda d: bubbles(d) == expected, what="the chat after a reload")
    errors = [e for e in console_errors(browser) if "/api/" not in e]  # the restart's drop
    assert errors == []
