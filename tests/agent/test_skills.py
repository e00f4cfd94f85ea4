"""Skills: front matter parsing, the index and its cache, and the `skill` tool."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from soulflow.agent.skills import SkillIndex, first_text_line, parse_front_matter
from soulflow.agent.tools.base import ChatRef, ToolContext, ToolError
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.agent.tools.skill_tool import MAX_SKILL_BYTES, SkillTool


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def skill(tmp_path: Path, directory: str, text: str) -> Path:
    path = tmp_path / "skills" / directory / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(workspace=tmp_path, chat=ChatRef("local", "c1"))


@pytest.mark.parametrize(("text", "fields", "body"), [
    ("---\nname: deploy\ndescription: Ship it\n---\nBody", {"name": "deploy",
                                                           "description": "Ship it"}, "Body"),
    ("\ufeff\n---\nName: 'quoted'\ndescription: \"a: b\"\n---\n\nBody",
     {"name": "quoted", "description": "a: b"}, "Body"),
    ("---\ndescription: >\n  folded over\n  two lines\ntags:\n  - x\n# comment\n---\nB",
     {"description": "folded over two lines", "tags": "- x"}, "B"),
    ("---\nname: never closed\nBody", {"name": "never closed"}, "Body"),
    ("---\nBody right after a fence", {}, "---\nBody right after a fence"),
    ("No front matter\n---\nname: x\n---", {}, "No front matter\n---\nname: x\n---"),
    ("---\n---\nEmpty block", {}, "Empty block"),
    ("---\njust words\n: no key\nname: ok\n...\nDots close it", {"name": "ok"},
     "Dots close it"),
])
def test_front_matter_edge_cases(text: str, fields: dict[str, str], body: str) -> None:
    assert parse_front_matter(text) == (fields, body)


def test_first_text_line_skips_headings_and_fences() -> None:
    assert first_text_line("\n# Title\n---\n\n  Real line  \nmore") == "Real line"
    assert first_text_line("# only a heading\n") == ""


def test_index_falls_back_to_directory_and_first_line(tmp_path: Path) -> None:
    skill(tmp_path, "b-good", "---\nname: good\ndescription: Does good things\n---\nText")
    skill(tmp_path, "a-bare", "# Heading\n\nFirst real line.\nSecond.")
    skill(tmp_path, "c-broken", "---\nname: [unclosed\n\nWhatever it says")
    skill(tmp_path, "d-empty", "")
    (tmp_path / "skills" / "not-a-skill").mkdir()
    (tmp_path / "skills" / "README.md").write_text("not a skill either")
    index = SkillIndex(tmp_path)
    listed = [(s.name, s.description, s.directory) for s in index.list()]
    assert listed == [
        ("a-bare", "First real line.", "a-bare"),
        ("good", "Does good things", "b-good"),
        ("[unclosed", "Whatever it says", "c-broken"),
        ("d-empty", "", "d-empty"),
    ]
    assert "- **d-empty**" in index.prompt_section()


def test_long_descriptions_are_cut_to_one_line(tmp_path: Path) -> None:
    skill(tmp_path, "long", "---\ndescription: " + "word " * 200 + "\n---\n")
    description = SkillIndex(tmp_path).list()[0].description
    assert len(description) <= 300 and description.endswith("…") and "\n" not in description


def test_index_without_skills_dir(tmp_path: Path) -> None:
    index = SkillIndex(tmp_path)
    assert index.list() == [] and index.prompt_section() == "" and index.find("x") is None


def test_index_rechecks_once_a_second_and_sees_edits(tmp_path: Path) -> None:
    clock = Clock()
    path = skill(tmp_path, "one", "---\ndescription: v1\n---\n")
    index = SkillIndex(tmp_path, clock=clock)
    assert index.list()[0].description == "v1"
    path.write_text("---\ndescription: version two\n---\n", encoding="utf-8")
    skill(tmp_path, "two", "Second skill")
    clock.now += 0.5
    assert [s.description for s in index.list()] == ["v1"]
    clock.now += 0.6
    assert [s.description for s in index.list()] == ["version two", "Second skill"]


def test_find_by_name_directory_or_case(tmp_path: Path) -> None:
    skill(tmp_path, "release-notes", "---\nname: Release Notes\n---\nWrite them.")
    index = SkillIndex(tmp_path)
    for name in ("Release Notes", "release-notes", "release notes", " RELEASE-NOTES "):
        found = index.find(name)
        assert found is not None and found.directory == "release-notes"
    assert index.find("missing") is None


async def test_skill_tool_returns_full_text(tmp_path: Path) -> None:
    text = "---\nname: deploy\ndescription: Ship\n---\n# Deploy\n\nStep 1.\nStep 2.\n"
    skill(tmp_path, "deploy", text)
    tool = SkillTool(SkillIndex(tmp_path))
    assert tool.idempotent and tool.name == "skill"
    assert await tool.run({"name": "deploy"}, ctx(tmp_path)) == text


async def test_skill_tool_unknown_name_lists_available(tmp_path: Path) -> None:
    skill(tmp_path, "deploy", "Ship.")
    skill(tmp_path, "review", "Review.")
    tool = SkillTool(SkillIndex(tmp_path))
    with pytest.raises(ToolError, match=r"unknown skill 'nope'.*deploy, review"):
        await tool.run({"name": "nope"}, ctx(tmp_path))
    empty = SkillTool(SkillIndex(tmp_path / "elsewhere"))
    with pytest.raises(ToolError, match="none"):
        await empty.run({"name": "x"}, ctx(tmp_path))


async def test_skill_tool_caps_size(tmp_path: Path) -> None:
    skill(tmp_path, "big", "x" * (MAX_SKILL_BYTES + 5000))
    output = await SkillTool(SkillIndex(tmp_path)).run({"name": "big"}, ctx(tmp_path))
    assert output.startswith("x" * 1000)
    assert output.count("x") == MAX_SKILL_BYTES
    assert "truncated at 100 KB" in output and "skills/big/SKILL.md" in output


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
@pytest.mark.parametrize("target", ["outside", "inbound", "folder"])
async def test_a_linked_skill_is_refused_by_the_index_and_the_tool(
        tmp_path: Path, target: str) -> None:
    """Finding 6: `skills/x/SKILL.md -> runtime/bus/inbound.jsonl` handed other chats'
    messages to the `skill` tool (and its first line to every prompt's index)."""
    workspace = tmp_path / "ws"
    outside = tmp_path / "outside.md"
    outside.write_text("---\ndescription: HOST-FILE-LINE\n---\nprivate")
    inbound = workspace / "runtime" / "bus" / "inbound.jsonl"
    inbound.parent.mkdir(parents=True)
    inbound.write_text('{"text": "BOB-PRIVATE-MESSAGE"}\n')
    (workspace / "skills").mkdir()
    if target == "folder":  # the skill folder itself is a link
        (workspace / "skills" / "evil").symlink_to(outside.parent)
        (tmp_path / "SKILL.md").write_text("HOST-FILE-LINE")
    else:
        link = workspace / "skills" / "evil" / "SKILL.md"
        link.parent.mkdir(parents=True)
        link.symlink_to(outside if target == "outside" else inbound)
    skill(workspace, "good", "---\ndescription: fine\n---\nok")
    index = SkillIndex(workspace)
    assert [s.name for s in index.list()] == ["good"]
    assert "evil" in index.refused
    section = index.prompt_section()
    assert "HOST-FILE-LINE" not in section and "BOB-PRIVATE" not in section
    with pytest.raises(ToolError, match="cannot be read") as refused:
        await SkillTool(index).run({"name": "evil"}, ctx(workspace))
    assert "BOB-PRIVATE" not in str(refused.value) and "private" not in str(refused.value)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
async def test_a_skill_swapped_for_a_link_after_listing_is_refused(tmp_path: Path) -> None:
    path = skill(tmp_path, "deploy", "Ship.")
    index = SkillIndex(tmp_path, clock=lambda: 0.0)  # listed once: the swap comes after
    tool = SkillTool(index)
    assert await tool.run({"name": "deploy"}, ctx(tmp_path)) == "Ship."
    secret = tmp_path / "runtime" / "security" / "master.key"
    secret.parent.mkdir(parents=True)
    secret.write_bytes(b"K" * 32)
    path.unlink()
    path.symlink_to(secret)  # within the index's one-second recheck: still listed
    with pytest.raises(ToolError, match="cannot read skill deploy"):
        await tool.run({"name": "deploy"}, ctx(tmp_path))


async def test_skill_tool_through_the_registry(tmp_path: Path) -> None:
    skill(tmp_path, "deploy", "Ship it.")
    registry = ToolRegistry()
    registry.register(SkillTool(SkillIndex(tmp_path)))
    ok = await registry.execute("skill", {"name": "deploy"}, ctx(tmp_path))
    assert ok.status == "ok" and ok.output == "Ship it."
    bad = await registry.execute("skill", {}, ctx(tmp_path))
    assert bad.status == "error"
