"""The page's files, read as text: data goes in as text only, and every file is served."""

from __future__ import annotations

import re
from importlib import resources

from soulflow.dashboard.guard import STATIC_ASSETS

STATIC = resources.files("soulflow.dashboard").joinpath("static")
#: ways to turn a string into markup or code; the page uses textContent and createElement
MARKUP_SINKS = re.compile(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|"
                          r"new Function|setAttribute\(\s*[\"']on|srcdoc")


def test_no_script_turns_data_into_markup() -> None:
    scripts = [p for p in STATIC.iterdir() if p.name.endswith(".js")]
    assert scripts
    for script in scripts:
        found = MARKUP_SINKS.findall(script.read_text(encoding="utf-8"))
        assert found == [], f"{script.name}: {found}"


def test_every_file_of_the_page_is_served() -> None:
    files = {p.name for p in STATIC.iterdir() if p.name != "index.html"}
    assert files == set(STATIC_ASSETS)
    page = STATIC.joinpath("index.html").read_text(encoding="utf-8")
    assert not re.search(r"<script(?![^>]*\bsrc=)", page), "inline script (the CSP forbids it)"
    assert not re.search(r"\son[a-z]+=", page), "inline event handler (the CSP forbids it)"
