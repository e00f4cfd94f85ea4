"""The console driven by keyboard, in a real headless Chromium against a real `soulflow run`.

Cards are patched in place: a focused Approve button stays the same node, and keeps the
focus, through refreshes and while other approvals come and go; and an approval can be
decided with Tab and Enter or Space alone.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.test_console_page import console_errors, open_console, until
from tests.e2e.harness import Daemon, wait_for

try:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
except ImportError:  # a skip, and under CI a failure (tests/conftest.py)
    pytest.skip("selenium is not installed (pip install -e '.[dev]')", allow_module_level=True)

MAX_TABS = 120


def approval_ids(daemon: Daemon) -> list[str]:
    return [a.get("approval_id") or a["run_id"] for a in daemon.state().get("approvals", [])]


def ask_approval(daemon: Daemon, fake_llm: Any, chat_id: str) -> str:
    """A write_file call in `chat_id` waiting for the operator; its approval's key."""
    before = set(approval_ids(daemon))
    fake_llm.script_tool_call("write_file", {"path": f"notes/{chat_id}.txt", "content": chat_id})
    daemon.say(f"write the {chat_id} note", chat_id=chat_id)
    return wait_for(lambda: next(iter(set(approval_ids(daemon)) - before), None),
                    what=f"the approval asked in {chat_id}")


def approve_button(driver: Any, key: str) -> Any:
    return driver.find_element(
        By.CSS_SELECTOR, f'#approvals [data-key="{key}"] button[data-key="approve"]')


def tab_to(driver: Any, target: Any, what: str) -> None:
    """Press Tab (only Tab) until `target` has the focus."""
    driver.execute_script("document.activeElement.blur(); window.scrollTo(0, 0)")
    for _ in range(MAX_TABS):
        if driver.switch_to.active_element == target:
            return
        ActionChains(driver).send_keys(Keys.TAB).perform()
    raise AssertionError(f"{MAX_TABS} presses of Tab never reached {what}")


def renders(driver: Any) -> int:
    return int(driver.find_element(By.ID, "main").get_attribute("data-renders") or 0)


def marked_and_focused(driver: Any, mark: str) -> bool:
    return bool(driver.execute_script(
        "return document.activeElement && document.activeElement.soulflowTestMark === arguments[0]",
        mark))


@pytest.mark.parametrize("width", [1280, 375])
def test_focused_approve_keeps_its_node_and_keyboard_decides(browser, make_daemon, fake_llm,
                                                             width: int) -> None:
    daemon = make_daemon().start()
    open_console(browser, daemon)
    browser.set_window_size(width, 1000)
    first = ask_approval(daemon, fake_llm, "alpha")
    second = ask_approval(daemon, fake_llm, "beta")
    until(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#approvals .approval")) == 2,
          what="both approval cards")

    # keyboard only: Tab to beta's Approve button; the test marks that very node
    target = approve_button(browser, second)
    tab_to(browser, target, "beta's Approve button")
    browser.execute_script("arguments[0].soulflowTestMark = 'beta'", target)

    # several refreshes (each live event asks for one; the page also reads every 5 s)
    start = renders(browser)
    for n in range(3):
        daemon.say(f"chatter {n}", chat_id="chatter")
        until(browser, lambda d, n=n: renders(d) >= start + n + 1, what=f"refresh {n + 1}")
    assert marked_and_focused(browser, "beta"), "the refreshes replaced the focused button"

    # another approval decided (removed above it) and a new one asked (added): still the node
    _decide(daemon, first, "deny")
    until(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#approvals .approval")) == 1,
          what="alpha's card gone")
    assert marked_and_focused(browser, "beta"), "removing a card replaced its neighbour"
    third = ask_approval(daemon, fake_llm, "gamma")
    until(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#approvals .approval")) == 2,
          what="gamma's card")
    assert marked_and_focused(browser, "beta"), "adding a card replaced its neighbour"

    # Enter on the focused button decides beta's approval: the tool runs
    ActionChains(browser).send_keys(Keys.ENTER).perform()
    wait_for(lambda: (daemon.workspace / "notes" / "beta.txt").exists(),
             what="beta's write_file, approved by Enter")
    until(browser, lambda d: not d.find_elements(
        By.CSS_SELECTOR, f'#approvals [data-key="{second}"]'), what="beta's card gone")
    # the focus is not dropped to the top of the page: it waits on the section's heading
    assert browser.switch_to.active_element == browser.find_element(By.ID, "h-approvals")
    ActionChains(browser).send_keys(Keys.TAB).perform()  # the next Tab: gamma's Approve
    assert browser.switch_to.active_element == approve_button(browser, third)

    # Space on gamma's button, reached by Tab alone
    tab_to(browser, approve_button(browser, third), "gamma's Approve button")
    ActionChains(browser).send_keys(Keys.SPACE).perform()
    wait_for(lambda: (daemon.workspace / "notes" / "gamma.txt").exists(),
             what="gamma's write_file, approved by Space")
    until(browser, lambda d: "Nothing waits" in d.find_element(By.ID, "approvals").text,
          what="no approval left")
    assert not (daemon.workspace / "notes" / "alpha.txt").exists()  # it was denied
    assert console_errors(browser) == []


def _decide(daemon: Daemon, key: str, decision: str) -> None:
    approval = next(a for a in daemon.state()["approvals"]
                    if (a.get("approval_id") or a["run_id"]) == key)
    target = {"task_id": approval["task_id"]} if approval["kind"] == "task" else \
        {"run_id": approval["run_id"], "approval_id": approval["approval_id"]}
    answer = daemon.api("POST", "/api/approvals/decide", json={**target, "decision": decision})
    assert answer.status_code == 200, answer.text


PATCH_CASES = """
const done = arguments[arguments.length - 1];
import("/static/render.js").then(({ el, button, item, fill }) => {
  const box = el("div", "list");
  document.getElementById("sec-decisions").append(box);
  const rows = keys => keys.map(k => item({ key: k, title: "row " + k,
    actions: [button("Go", "go", () => {}, {}, "go")] }));
  fill(box, rows(["a", "b", "c"]), "none");
  const [a, b, c] = [...box.children];
  const goB = b.querySelector("button");
  fill(box, rows(["c", "a", "b"]), "none");          // reordered: the same three nodes
  const reordered = box.children[0] === c && box.children[1] === a && box.children[2] === b;
  fill(box, [item({ key: "b", title: "row b, renamed", actions: [
    button("Stop", "stop", () => {}, {}, "stop")] })], "none");  // its button changed meaning
  const kept = box.children.length === 1 && box.children[0] === b;
  const renamed = b.querySelector(".title").textContent === "row b, renamed";
  const stop = b.querySelector("button");
  const newButton = stop !== goB && stop.textContent === "Stop";
  fill(box, [], "Nothing here.");
  const empty = box.textContent === "Nothing here.";
  fill(box, rows(["<img src=x onerror=alert(1)>"]), "none");  // a key is an attribute value
  const hostile = box.querySelectorAll("img").length === 0 &&
    box.children[0].dataset.key === "<img src=x onerror=alert(1)>";
  box.remove();
  done({ reordered, kept, renamed, newButton, empty, hostile });
});
"""


def test_patching_keeps_nodes_by_key_and_replaces_what_changed_meaning(browser,
                                                                       make_daemon) -> None:
    """The keyed update any card uses (render.js `fill`): rows move without being rebuilt, a
    button whose meaning changed is a new node, an empty list says so, keys stay text."""
    daemon = make_daemon().start()
    open_console(browser, daemon)
    result = browser.execute_async_script(PATCH_CASES)
    assert result == {"reordered": True, "kept": True, "renamed": True, "newButton": True,
                      "empty": True, "hostile": True}
    assert console_errors(browser) == []
