"""Every setting has a default and an example in docs/config.md, and its own parser accepts
both (an example the daemon would refuse is worse than none)."""

from __future__ import annotations

import pytest

from soulflow.config.catalog import SETTINGS, config_reference_markdown
from soulflow.config.examples import EXAMPLES


@pytest.mark.parametrize("setting", SETTINGS, ids=[s.name for s in SETTINGS])
def test_every_setting_has_a_parsable_default_and_example(setting: object) -> None:
    name, parse, default = setting.name, setting.parse, setting.default  # type: ignore[attr-defined]
    assert name in EXAMPLES, f"add an example for {name} to soulflow/config/examples.py"
    parse(EXAMPLES[name])
    if default:
        parse(default)


def test_no_example_for_a_setting_that_does_not_exist() -> None:
    assert set(EXAMPLES) <= {s.name for s in SETTINGS}


def test_the_reference_shows_the_example_column() -> None:
    reference = config_reference_markdown()
    assert "| name | default | example | accepted values | meaning |" in reference
    assert "| `LOG_FORMAT` | `text` | `json` | one of text, json |" in reference
