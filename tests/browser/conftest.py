"""Headless Chromium (Debian's `chromium` + `chromium-driver`) driven by Selenium.

Selenium Manager never runs: the driver is the system's /usr/bin/chromedriver, so nothing is
downloaded at test time. Without a browser the tests are skipped with the reason; under
`CI=true` that skip is a failure (the suite's one rule, tests/conftest.py).
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Daemon, daemon_factory
from tests.fakes.openai_api import FakeOpenAIThread

CHROMIUM = os.environ.get("SOULFLOW_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("SOULFLOW_CHROMEDRIVER", "/usr/bin/chromedriver")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
TOKEN = "browser-test-token-1a2b3c4d5e"


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (Path(path).exists() or shutil.which(path)):
            return f"{path} is missing (apt-get install chromium chromium-driver)"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    reason = _missing()
    if reason is not None:
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1280,1000", "--no-first-run",
                     "--disable-extensions", "--disable-background-networking"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def make_daemon(tmp_path: Path, fake_llm: FakeOpenAIThread) -> Iterator[Callable[..., Daemon]]:
    """Daemons on a fixed port (a restarted daemon must come back where the page looks)."""
    with daemon_factory(tmp_path, fake_llm.base_url, DASHBOARD_TOKEN=TOKEN,
                        DASHBOARD_PORT=str(free_port())) as factory:
        yield factory
