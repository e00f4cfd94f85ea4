"""The suite's one rule about skips (tests/conftest.py): under CI=true every kind of skip fails,
except one raised with `skip_platform_fact` for an entry of PLATFORM_FACTS; elsewhere a skip
stays a skip. A small suite using the rule runs in a pytest subprocess, once each way."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import PLATFORM_FACTS, skip_platform_fact

ROOT = Path(__file__).resolve().parents[2]

SUITE = {
    "conftest.py": """
from tests.conftest import (pytest_make_collect_report, pytest_runtest_makereport,  # noqa
                            skip_platform_fact)
""",
    "test_cases.py": """
import pytest
from tests.conftest import skip_platform_fact

@pytest.fixture
def needs_something():
    pytest.skip("something is not installed")

def test_skip_in_the_test():
    pytest.skip("no redis-server here")

@pytest.mark.skipif(True, reason="a skipif mark")
def test_skipif():
    pass

def test_skip_in_a_fixture(needs_something):
    pass

def test_a_platform_fact():
    skip_platform_fact("no-openat2", "this kernel has no openat2")

def test_a_forged_fact():
    pytest.skip("platform fact [made-up]: not on the list")

@pytest.mark.xfail(strict=True, reason="a documented limit")
def test_a_strict_xfail():
    assert False

def test_passes():
    pass
""",
    "test_module_skip.py": """
import pytest
pytest.skip("selenium is not installed", allow_module_level=True)

def test_never_collected():
    pass
""",
}


def run_suite(tmp_path: Path, ci: bool) -> dict[str, str]:
    """Outcome per test (or per module, for a collection report) of the small suite."""
    for name, text in SUITE.items():
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = str(ROOT)
    if ci:
        env["CI"] = "true"
    junit = tmp_path / "report.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "--continue-on-collection-errors", "--rootdir", str(tmp_path),
                    f"--junitxml={junit}", str(tmp_path)],
                   cwd=tmp_path, env=env, capture_output=True, timeout=120, check=False)
    outcomes = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        tags = {child.tag for child in case}
        outcome = next((t for t in ("error", "failure", "skipped") if t in tags), "passed")
        outcomes[case.get("name") or case.get("classname", "")] = outcome
    return outcomes


def test_under_ci_every_skip_fails_but_a_platform_fact(tmp_path: Path) -> None:
    outcomes = run_suite(tmp_path, ci=True)
    assert outcomes.pop("test_module_skip") == "error"  # the module-level skip
    assert outcomes == {
        "test_skip_in_the_test": "failure",
        "test_skipif": "error", "test_skip_in_a_fixture": "error",  # setup failures
        "test_a_platform_fact": "skipped", "test_a_forged_fact": "failure",
        "test_a_strict_xfail": "skipped",  # xfailed: junit reports it as skipped
        "test_passes": "passed"}


def test_elsewhere_a_skip_stays_a_skip(tmp_path: Path) -> None:
    outcomes = run_suite(tmp_path, ci=False)
    assert outcomes.pop("test_module_skip") == "skipped"
    assert outcomes == {
        "test_skip_in_the_test": "skipped", "test_skipif": "skipped",
        "test_skip_in_a_fixture": "skipped", "test_a_platform_fact": "skipped",
        "test_a_forged_fact": "skipped", "test_a_strict_xfail": "skipped",
        "test_passes": "passed"}


def test_every_fact_says_why_and_an_unknown_one_is_refused() -> None:
    assert PLATFORM_FACTS and all(len(why) > 80 for why in PLATFORM_FACTS.values())
    with pytest.raises(KeyError):
        skip_platform_fact("redis-server-missing", "not a fact: install it")
