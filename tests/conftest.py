"""Fixtures every test directory may use, the suite's one rule about skips, and its check of
every daemon's log.

**Under `CI=true` a skipped test is a failed test**, whatever skipped it (`pytest.skip` in a test
or fixture, a `skipif` mark, a module-level skip): a CI run is green only when every test ran.
Elsewhere a skip stays a skip, so a laptop without redis-server or Chromium can still run the
rest. The one exception is a skip raised with :func:`skip_platform_fact` naming an entry of
:data:`PLATFORM_FACTS`: something the machine is, which no setup step can change, and whose
code path is covered by another test that does run there. A missing package, binary, browser
or permission is setup, never a fact: install it, or handle the case in the code and test
that. (The cgroup version a host booted with is a fact; a cgroup the suite could make is not.
A strict `xfail` is not a skip: it fails the moment the limit it documents goes away.)

**A traceback in the log of a daemon the test ran fails the test** (at teardown), unless the
test allowed that one with `Daemon.allow_traceback`: see tests/e2e/harness.py.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from typing import Any, NoReturn

import pytest

from tests.e2e import harness
from tests.fakes.openai_api import FakeOpenAIThread

#: Skips that stand under CI=true. Each entry: why it is a fact of the platform, not of the
#: setup, and what covers its code path there instead.
PLATFORM_FACTS: dict[str, str] = {
    "no-openat2": (
        "The running kernel has no openat2(2) (Linux before 5.6). The kernel is the host's, "
        "not something the suite installs; the daemon then resolves workspace paths with the "
        "component-wise O_NOFOLLOW fallback, and tests/unit/test_beneath.py runs every case "
        "on that fallback on every kernel."),
    "no-cgroup-v1-pids": (
        "The host mounts no cgroup-v1 pids hierarchy this user may write (a cgroup-v2-only "
        "host, chosen when it booted, or a non-root user on a systemd host). Which cgroup "
        "version a host runs is the host's, not a package the suite could install. There the "
        "per-call cgroup code is not used: a non-root daemon's cap is RLIMIT_NPROC (tested by "
        "test_the_process_cap_holds_even_for_root), and root's missing cap is the documented "
        "limit that tests/tools/test_sandbox_parts.py::"
        "test_without_a_pids_cgroup_root_is_bounded_by_the_wall_clock_and_told_so checks on "
        "every host."),
}
_PREFIX = "platform fact "


def skip_platform_fact(fact: str, detail: str) -> NoReturn:
    """Skip because of `fact` (a key of `PLATFORM_FACTS`); the only skip CI lets stand."""
    if fact not in PLATFORM_FACTS:
        raise KeyError(f"{fact!r} is not in PLATFORM_FACTS (tests/conftest.py)")
    pytest.skip(f"{_PREFIX}[{fact}]: {detail}")


def _ci() -> bool:
    return os.environ.get("CI") == "true"


def _skip_reason(longrepr: Any) -> str:
    """The reason of a skip report (`(path, line, "Skipped: <reason>")`)."""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _is_fact(reason: str) -> bool:
    if not reason.startswith(f"{_PREFIX}["):
        return False
    return reason[len(_PREFIX) + 1:].split("]", 1)[0] in PLATFORM_FACTS


def _refuse(report: pytest.TestReport | pytest.CollectReport) -> None:
    """Turn a skip that is not a platform fact into a failure (CI only)."""
    if not (_ci() and report.skipped) or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report.longrepr)
    if _is_fact(reason):
        return
    report.outcome = "failed"
    report.longrepr = (f"skipped under CI=true, which refuses skips (tests/conftest.py): "
                       f"{reason}\nInstall what is missing, or handle the case and test that; "
                       f"only PLATFORM_FACTS may skip.")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, Any, None]:
    outcome = yield
    _refuse(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome = yield
    _refuse(outcome.get_result())


@pytest.fixture(autouse=True)
def daemon_logs_have_no_tracebacks() -> Iterator[None]:
    """After the test (and its fixtures, which stop the daemons), every daemon log written
    meanwhile holds no traceback the test did not allow. A daemon a module-scoped fixture
    keeps running is read again after each test that used it."""
    yield
    found = [f"{daemon.log_path}:\n{record}" for daemon in harness.BUILT
             for record in daemon.new_tracebacks()]
    harness.BUILT[:] = [daemon for daemon in harness.BUILT if daemon.alive()]
    if found:
        pytest.fail("a daemon logged a traceback (allow one a test provokes on purpose with "
                    "Daemon.allow_traceback):\n\n" + "\n\n".join(found), pytrace=False)


@pytest.fixture
def fake_llm() -> Iterator[FakeOpenAIThread]:
    """The fake OpenAI-compatible model in a thread of its own, for a daemon subprocess."""
    with FakeOpenAIThread() as fake:
        yield fake


@pytest.fixture(params=["openat2", "fallback"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run a test on both of `Beneath`'s resolvers: the kernel's ``openat2`` and the
    component-wise ``O_NOFOLLOW`` fallback older kernels get."""
    from soulflow.storage import beneath

    if request.param == "openat2":
        if not beneath.openat2_available():
            skip_platform_fact("no-openat2", "this kernel has no openat2 (the fallback is "
                                             "tested beside it)")
    else:
        monkeypatch.setattr(beneath._OPENAT2, "available", lambda: False)
    yield request.param
