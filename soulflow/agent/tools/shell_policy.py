"""Which shell commands need the user's approval before the `exec` tool runs them.

This is a speed bump for mistakes, not a sandbox: a determined command can always hide what
it does from a pattern match. It catches the commands a model most plausibly gets wrong -
recursive deletes, disk writes, force pushes, piping downloads into a shell, privilege
escalation - and any command that names a path outside the workspace.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class _Rule:
    label: str
    pattern: re.Pattern[str]


def _rule(label: str, pattern: str, flags: re.RegexFlag = re.IGNORECASE) -> _Rule:
    return _Rule(label, re.compile(pattern, flags))


_FLAGS = r"(?:\s+-{1,2}[\w-]*)*"  # any run of options before the one we look for
_DESTRUCTIVE: tuple[_Rule, ...] = (
    _rule("recursive delete (rm -r)", rf"\brm{_FLAGS}\s+(?:-[a-z]*r[a-z]*\b|--recursive\b)"),
    _rule("filesystem creation (mkfs)", r"\bmkfs(?:\.\w+)?\b"),
    _rule("raw disk copy (dd)", r"\bdd\b[^\n;|&]*\b(?:if|of)="),
    _rule("writing to a block device", r">\s*/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk)"),
    _rule("shutdown or reboot", r"\b(?:shutdown|reboot|poweroff|halt)\b|\binit\s+[06]\b"),
    _rule(  # case-sensitive: `chmod -r` removes read permission, it is not recursive
        "recursive permission change",
        rf"\bch(?:mod|own|grp){_FLAGS}\s+(?:-[a-zA-Z]*R|--recursive)",
        re.RegexFlag(0),
    ),
    _rule(
        "force push (git push --force)",
        r"\bgit\b[^\n;|&]*\bpush\b[^\n;|&]*\s(?:--force\S*|-f\b|\+\S)",
    ),
    _rule("discarding changes (git reset --hard)", r"\bgit\b[^\n;|&]*\breset\b[^\n;|&]*--hard"),
    _rule("deleting untracked files (git clean -f)", r"\bgit\b[^\n;|&]*\bclean\b[^\n;|&]*\s-\w*f"),
    _rule(
        "piping a download into a shell",
        r"\b(?:curl|wget)\b[^\n;]*\|\s*(?:sudo\s+)?(?:ba|da|z|k|fi)?sh\b",
    ),
    _rule("killing init or every process", r"\bkill(?:all)?\b(?:\s+-\S+)*\s+-?1\b(?![\d.])"),
    _rule("fork bomb", r":\s*\(\s*\)\s*\{[^}]*:\s*\|\s*:\s*&"),
    _rule("privilege escalation (sudo/su/doas)", r"(?:^|[\s;&|(`])(?:sudo|doas|su)(?=\s|$)"),
    _rule("secure delete (shred)", r"\bshred\b"),
    _rule("deleting files with find -delete", r"\bfind\b[^\n;|&]*\s-delete\b"),
)

ALLOWED_ABSOLUTE = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/stdout", "/dev/stderr")
ALLOWED_ABSOLUTE_TREES = ("/tmp",)


def destructive_reason(command: str) -> str | None:
    """The first destructive pattern in ``command``, as ``destructive command: <what>``."""
    for rule in _DESTRUCTIVE:
        if rule.pattern.search(command):
            return f"destructive command: {rule.label}"
    return None


def outside_workspace_reason(command: str) -> str | None:
    """``touches paths outside the workspace`` if any word is a ``..`` or absolute path."""
    for word in _words(command):
        if "://" in word:
            continue  # a URL, not a path
        for candidate in _path_candidates(word):
            if _escapes(candidate):
                return f"touches paths outside the workspace ({candidate})"
    return None


def approval_reason(command: str) -> str | None:
    """Why ``command`` needs approval (destructive first), or None."""
    return destructive_reason(command) or outside_workspace_reason(command)


def _words(command: str) -> list[str]:
    """Shell words with redirections split off; falls back to whitespace on bad quoting."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        return list(lexer)
    except ValueError:
        return re.split(r"[\s;&|<>()]+", command)


def _path_candidates(word: str) -> list[str]:
    """The word itself plus what follows ``=`` or ``:`` (``--out=/etc/x``, ``PATH=/x:/y``)."""
    candidates = [word]
    for sep in ("=", ":"):
        if sep in word:
            candidates.extend(part for part in word.split(sep)[1:] if part)
    return candidates


def _escapes(word: str) -> bool:
    if ".." in word.split("/"):
        return True
    for prefix in ("$(", "`", '"', "'"):
        word = word.removeprefix(prefix)
    if not word.startswith("/"):
        return False
    if word in ALLOWED_ABSOLUTE:
        return False
    return not any(word == tree or word.startswith(tree + "/") for tree in ALLOWED_ABSOLUTE_TREES)
