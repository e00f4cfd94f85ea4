"""Skills: `skills/<name>/SKILL.md` files the agent reads on demand.

Only a one-line summary of each skill goes into the system prompt, so a workspace can hold
many long skills without paying for them on every turn; the model calls the `skill` tool to
read one in full when it needs it. Users write these files by hand, so everything here is
tolerant: a missing or broken front matter falls back to the directory name and the first
line of text rather than hiding the skill.

Skill files are opened through `Beneath`: a `SKILL.md` (or a skill folder) that is a link is
refused and logged, never followed, so a link planted by a chat's run cannot hand another
file — `runtime/bus/inbound.jsonl`, the vault key, a host file — to the index (whose lines
are in every chat's prompt) or to the `skill` tool.
"""

from __future__ import annotations

import logging
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from soulflow.storage.beneath import Beneath

log = logging.getLogger(__name__)

SKILLS_DIR = "skills"
SKILL_FILE = "SKILL.md"
RECHECK_S = 1.0
MAX_DESCRIPTION_CHARS = 300  # one index line per skill; the full text is one tool call away
_HEAD_BYTES = 16 * 1024  # front matter and first line live at the top; never read a huge file
_FENCE = "---"
_BLOCK_SCALARS = frozenset({">", "|", ">-", "|-", ">+", "|+"})
_KEY_LINE = re.compile(r"^[A-Za-z_][\w-]*\s*:")


def parse_front_matter(text: str) -> tuple[dict[str, str], str]:
    """Split `text` into simple front matter fields and the body.

    Accepts `key: value` lines between a first line `---` and a closing `---` (or `...`).
    Keys are lower-cased; values lose surrounding quotes; indented lines continue the
    previous value (so `description: >` with indented lines works). Anything else (lists,
    nested maps, comments) is ignored: this is not a YAML parser and needs no dependency.
    A block whose closing fence is missing ends at the first line that is not `key: value`;
    text that does not start with `---` has no front matter.
    """
    lines = text.lstrip("\ufeff").splitlines()
    start = 0
    while start < len(lines) and not lines[start].strip():
        start += 1
    if start >= len(lines) or lines[start].strip() != _FENCE:
        return {}, text
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].strip() in (_FENCE, "...")), None)
    body_start = end + 1 if end is not None else None
    if end is None:  # forgotten closing fence: the `key: value` lines that follow still count
        end = start + 1
        while end < len(lines) and (_KEY_LINE.match(lines[end])
                                    or (end > start + 1 and lines[end][:1].isspace())):
            end += 1
        if end == start + 1:
            return {}, text
        body_start = end
    fields: dict[str, str] = {}
    key: str | None = None
    for line in lines[start + 1:end]:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if line[:1].isspace() and key is not None:  # continuation of the previous value
            fields[key] = f"{fields[key]} {stripped}".strip()
            continue
        name, colon, value = stripped.partition(":")
        if not colon or not name.strip():
            key = None
            continue
        key = name.strip().lower()
        value = value.strip()
        fields[key] = "" if value in _BLOCK_SCALARS else _unquote(value)
    return fields, "\n".join(lines[body_start:]).lstrip("\n")


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def first_text_line(body: str) -> str:
    """The first line that is not blank, a heading or a fence: a fallback description."""
    for line in body.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and stripped not in (_FENCE, "```"):
            return stripped
    return ""


def one_line(text: str, limit: int = MAX_DESCRIPTION_CHARS) -> str:
    """Collapse whitespace and cut to `limit` characters (with an ellipsis)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


@dataclass(frozen=True, slots=True)
class Skill:
    """One skill as the index shows it; `rel` is its SKILL.md, relative to the workspace,
    `path` the same file as an absolute path (for messages)."""

    name: str
    description: str
    path: Path
    rel: PurePosixPath

    @property
    def directory(self) -> str:
        return self.rel.parent.name


def read_skill_summary(files: Beneath, rel: PurePosixPath) -> Skill:
    """Name and description of one SKILL.md, with fallbacks for missing fields; a link is
    refused (`RefusedPath`)."""
    head = files.read_bytes(rel, _HEAD_BYTES)[:_HEAD_BYTES].decode("utf-8", errors="replace")
    fields, body = parse_front_matter(head)
    name = one_line(fields.get("name", ""), 80) or rel.parent.name
    description = fields.get("description", "") or first_text_line(body)
    return Skill(name=name, description=one_line(description), path=files.root / rel, rel=rel)


class SkillIndex:
    """The workspace's skills, re-listed at most once a second.

    Each file's summary is cached by (mtime, size), so the periodic recheck costs a
    directory listing and a few `stat` calls, not a read of every skill. `refused` names
    the skill folders whose SKILL.md was refused (a link, not a regular file) and why.
    """

    def __init__(self, workspace: Path, *, clock: Callable[[], float] = time.monotonic,
                 recheck_s: float = RECHECK_S, files: Beneath | None = None) -> None:
        self.files = files if files is not None else Beneath(workspace)
        self.directory = self.files.root / SKILLS_DIR
        self._clock = clock
        self._recheck_s = recheck_s
        self._checked_at = float("-inf")
        self._skills: list[Skill] = []
        self._by_file: dict[PurePosixPath, tuple[tuple[int, int], Skill]] = {}
        self.refused: dict[str, str] = {}

    def list(self) -> list[Skill]:
        """Every readable skill, sorted by directory name."""
        now = self._clock()
        if now - self._checked_at >= self._recheck_s:
            self._skills = self._scan()
            self._checked_at = now
        return list(self._skills)

    def find(self, name: str) -> Skill | None:
        """The skill called `name` (its front matter name or its directory name; exact
        match first, then ignoring case)."""
        wanted = name.strip()
        skills = self.list()
        for matches in (lambda s: wanted in (s.name, s.directory),
                        lambda s: wanted.casefold() in (s.name.casefold(),
                                                        s.directory.casefold())):
            found = next((s for s in skills if matches(s)), None)
            if found is not None:
                return found
        return None

    def names(self) -> list[str]:
        return [s.name for s in self.list()]

    def _scan(self) -> list[Skill]:
        try:
            folders = self.files.list_dir(SKILLS_DIR)
        except OSError as exc:  # missing, or `skills` itself is a link (refused)
            if not isinstance(exc, FileNotFoundError):
                self._refuse(SKILLS_DIR, exc)
            self._by_file.clear()
            return []
        skills: list[Skill] = []
        seen: dict[PurePosixPath, tuple[tuple[int, int], Skill]] = {}
        refused: dict[str, str] = {}
        for folder in folders:
            rel = PurePosixPath(SKILLS_DIR, folder.name, SKILL_FILE)
            if folder.kind == "link":
                refused[folder.name] = f"{SKILLS_DIR}/{folder.name} is a symbolic link"
                continue
            if folder.kind != "dir":
                continue
            try:
                found = self.files.stat(rel)
                if found is None:
                    continue
                if not stat.S_ISREG(found.st_mode):
                    raise OSError(f"{rel} is a symbolic link or not a regular file")
                stamp = (found.st_mtime_ns, found.st_size)
                cached = self._by_file.get(rel)
                skill = cached[1] if cached and cached[0] == stamp else \
                    read_skill_summary(self.files, rel)
            except OSError as exc:
                refused[folder.name] = str(exc)
                continue
            seen[rel] = (stamp, skill)
            skills.append(skill)
        for name, reason in refused.items():
            if self.refused.get(name) != reason:
                log.warning("skipping skill %s: %s", name, reason)
        self.refused = refused
        self._by_file = seen
        return skills

    def _refuse(self, what: str, exc: OSError) -> None:
        reason = str(exc)
        if self.refused.get(what) != reason:
            log.warning("skipping the skills folder %s: %s", what, reason)
        self.refused = {what: reason}

    def read(self, skill: Skill, limit: int) -> bytes:
        """The skill's SKILL.md (at most `limit`+1 bytes), opened again without following
        links: a file swapped for a link since it was listed is refused (`RefusedPath`)."""
        return self.files.read_bytes(skill.rel, limit)

    def prompt_section(self) -> str:
        """The system prompt's skills index: summaries only, and how to read a skill."""
        skills = self.list()
        if not skills:
            return ""
        lines = [f"- **{s.name}**: {s.description}" if s.description else f"- **{s.name}**"
                 for s in skills]
        return ("# Skills\n\nThese skills hold instructions for specific tasks. When one fits "
                "the request, call the `skill` tool with its name to read it in full before "
                "you start.\n\n" + "\n".join(lines))
