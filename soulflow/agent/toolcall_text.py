"""Tool calls written as text, for models and headless CLIs that have no native tool calling.

Such models are told (by `render_tool_instructions`) to answer with fenced ```tool_call blocks,
but in practice they drift into whatever their training favoured: Hermes/Qwen `<tool_call>` tags,
Llama `<function=...>` tags, a bare JSON object, JSON with Python literals or trailing commas.
The parser accepts all of these and repairs what it safely can. What it cannot turn into a call
becomes an error message for the model and stays in the text, so nothing the model wrote is lost.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from soulflow.agent.errors import AgentError
from soulflow.contracts import ToolCall

ERROR_SNIPPET_CHARS = 160

# Fence languages that always announce a tool call; `json` or unlabelled fences count only when
# the object inside looks like one, since models also use them for ordinary answers.
_TOOL_FENCES = {"tool_call", "tool"}
_MAYBE_TOOL_FENCES = {"json", ""}
_NAME_KEYS = ("name", "tool", "tool_name")
_ARG_KEYS = ("arguments", "args", "parameters", "input")

# One alternative per block shape; each may be cut off by the end of the reply (the model
# stopped early), which `\Z` accepts. A closing fence must end its line so that ``` inside
# argument strings does not end the block.
_BLOCK_RE = re.compile(
    r"```[ \t]*(?P<lang>[\w-]*)[^\n]*\n(?P<fence>.*?)(?:\n[ \t]*```|```[ \t]*(?=\n|\Z)|\Z)"
    r"|<tool_call>(?P<tag>.*?)(?:</tool_call>|\Z)"
    r"|<function=(?P<fname>[^>\s]+)>(?P<func>.*?)(?:</function>|\Z)",
    re.DOTALL,
)
_INNER_FENCE_RE = re.compile(r"\A\s*```[\w-]*[^\n]*\n(?P<body>.*?)(?:\n\s*```\s*)?\Z", re.DOTALL)
_PARAMETER_RE = re.compile(r"<parameter=(?P<key>[^>\s]+)>(?P<value>.*?)(?:</parameter>|\Z)",
                           re.DOTALL)
# An object that means to be a call: it opens with a brace and names its arguments somewhere.
_CALLISH_RE = re.compile(r"\A\{.*[\"']?\b(?:arguments|args|parameters)\b[\"']?\s*:", re.DOTALL)


@dataclass(slots=True)
class TextToolCalls:
    """What `parse_text_tool_calls` found: the calls, the text left around them, and one message
    per block that was meant as a call but could not become one (for telling the model)."""

    calls: list[ToolCall] = field(default_factory=list)
    remaining_text: str = ""
    errors: list[str] = field(default_factory=list)


_Calls = list[tuple[str, dict[str, Any]]]


class _Malformed(AgentError):
    """A block that was meant as a tool call but cannot be one; the message is for the model."""


def parse_text_tool_calls(
    text: str, known_tools: set[str] | None = None, *, id_prefix: str = "call_text_"
) -> TextToolCalls:
    """Extract tool calls from a model's text reply; see the module docstring for the shapes.

    Call ids are `<id_prefix><n>`, numbered from 1 within this reply; callers that key state by
    call id across turns should pass a prefix unique to the reply. Blocks that fail (bad JSON,
    no name, unknown tool when `known_tools` is given) are reported in `errors` and kept verbatim
    in `remaining_text`.
    """
    found = TextToolCalls()
    kept: list[str] = []
    pos = 0
    for match in _BLOCK_RE.finditer(text):
        kept.append(text[pos : match.start()])
        pos = match.end()
        if not _collect(found, partial(_block_calls, match), known_tools, id_prefix):
            kept.append(match.group(0))
    kept.append(text[pos:])
    bare = not found.calls and not found.errors and _CALLISH_RE.match(text.strip())
    if bare and _collect(found, partial(_json_calls, text.strip()), known_tools, id_prefix):
        kept = []
    found.remaining_text = re.sub(r"\n{3,}", "\n\n", "".join(kept)).strip()  # close the gaps
    return found


def _collect(found: TextToolCalls, extract: Callable[[], _Calls | None],
             known: set[str] | None, id_prefix: str) -> bool:
    """Add the calls `extract()` yields to `found`; False when the source must stay text (an
    ordinary code block, or a failed call, whose error is recorded)."""
    try:
        calls = extract()
    except _Malformed as exc:
        found.errors.append(str(exc))
        return False
    if calls is None:
        return False
    unknown = [name for name, _ in calls if known is not None and name not in known]
    if unknown:
        available = ", ".join(sorted(known or ())) or "(none)"
        found.errors += [f"unknown tool {name!r}; available tools: {available}" for name in unknown]
        return False
    for name, arguments in calls:
        found.calls.append(ToolCall(f"{id_prefix}{len(found.calls) + 1}", name, arguments))
    return True


def _block_calls(match: re.Match[str]) -> _Calls | None:
    """The calls in one matched block, or None when it is an ordinary code block."""
    if match.group("fname") is not None:
        name = match.group("fname")
        return [(name, _function_arguments(name, match.group("func")))]
    if match.group("tag") is not None:
        return _calls_from_value(_load_call_json(_strip_fence(match.group("tag"))))
    lang, body = match.group("lang").lower(), match.group("fence")
    if lang in _TOOL_FENCES:
        return _calls_from_value(_load_call_json(body))
    if lang in _MAYBE_TOOL_FENCES and _CALLISH_RE.match(body.strip()):
        return _json_calls(body)
    return None


def _json_calls(text: str) -> _Calls | None:
    """Calls from JSON found in an unlabelled place (a ```json fence, a whole reply) that
    mentions arguments: an error when unreadable, None when it is just some other JSON."""
    value = _load_call_json(text)
    return _calls_from_value(value) if _looks_like_call(value) else None


def _function_arguments(name: str, body: str) -> dict[str, Any]:
    """Arguments of a `<function=NAME>` block: a JSON object or `<parameter=KEY>` tags."""
    if "<parameter=" in body:
        return {m.group("key"): _parameter_value(m.group("value"))
                for m in _PARAMETER_RE.finditer(body)}
    body = _strip_fence(body)
    return _arguments(body, name) if body.strip() else {}


def _parameter_value(raw: str) -> Any:
    """A `<parameter>` value: JSON when it parses (numbers, lists), otherwise the text itself."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw.strip("\n")


def _calls_from_value(value: Any) -> _Calls:
    items = value if isinstance(value, list) else [value]
    if not items:
        raise _Malformed("empty tool call block; write one JSON object per call")
    return [_call_from_object(item) for item in items]


def _call_from_object(obj: Any) -> tuple[str, dict[str, Any]]:
    if not isinstance(obj, dict):
        raise _Malformed(f"a tool call must be a JSON object, got: {_snippet(json.dumps(obj))}")
    if isinstance(obj.get("function"), dict):  # the OpenAI wire shape, copied from training
        obj = obj["function"]
    name = next((obj[k].strip() for k in _NAME_KEYS if isinstance(obj.get(k), str)), "")
    if not name:
        raise _Malformed(f'tool call has no "name": {_snippet(json.dumps(obj))}')
    raw = next((obj[k] for k in _ARG_KEYS if k in obj), None)
    return name, _arguments(raw, name)


def _arguments(raw: Any, name: str) -> dict[str, Any]:
    """Arguments as a dict; a JSON string holding an object is accepted (and common)."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            raw = load_lenient_json(raw)
        except ValueError:
            raise _Malformed(f"arguments of {name!r} are not valid JSON: {_snippet(raw)}") from None
    if not isinstance(raw, dict):
        raise _Malformed(f"arguments of {name!r} must be a JSON object: {_snippet(str(raw))}")
    return raw


def _looks_like_call(value: Any) -> bool:
    """Whether a JSON value from an unlabelled place (a ```json fence, a bare reply) is a call."""
    if isinstance(value, list):
        return bool(value) and all(_looks_like_call(item) for item in value)
    if not isinstance(value, dict):
        return False
    if isinstance(value.get("function"), dict):
        return True
    has_name = any(isinstance(value.get(k), str) for k in _NAME_KEYS)
    return has_name and any(k in value for k in _ARG_KEYS)


def _load_call_json(text: str) -> Any:
    try:
        return load_lenient_json(text)
    except ValueError:
        raise _Malformed(f"tool call is not valid JSON: {_snippet(text)}") from None


def _strip_fence(text: str) -> str:
    """A `<tool_call>` body may itself be wrapped in a ```json fence."""
    match = _INNER_FENCE_RE.match(text)
    return match.group("body") if match else text


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= ERROR_SNIPPET_CHARS else flat[: ERROR_SNIPPET_CHARS - 3] + "..."


# -- lenient JSON ---------------------------------------------------------------------------

_LITERALS = {"true": "true", "false": "false", "null": "null", "True": "true",
             "False": "false", "None": "null", "NaN": "NaN", "Infinity": "Infinity"}
_JSON_ESCAPES = set('"\\/bfnrt')
_TOKEN_RE = re.compile(r"(?P<number>-?[0-9.]+(?:[eE][+-]?[0-9]+)?)|(?P<word>[A-Za-z_$][\w$]*)")
_HEX4_RE = re.compile(r"[0-9a-fA-F]{4}")


def load_lenient_json(text: str) -> Any:
    """Parse JSON as models write it: strict JSON first, else repaired (trailing commas, single
    quotes, unquoted keys, Python literals, missing closers at the end, chatter around the
    value). Raises ValueError when it still cannot be read."""
    try:
        return json.loads(text, strict=False)
    except ValueError:
        pass
    return json.loads(_repair_json(text), strict=False)


def _repair_json(text: str) -> str:
    """Rewrite the first JSON-ish value in `text` as strict JSON, token by token."""
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        raise ValueError("no JSON object or array found")
    out: list[str] = []
    closers: list[str] = []
    i = min(starts)
    while i < len(text):
        ch = text[i]
        if ch in "\"'":
            value, i = _read_string(text, i)
            out.append(json.dumps(value, ensure_ascii=False))
        elif token := _TOKEN_RE.match(text, i):
            out.append(token["number"] or _bare_word(token["word"], text, token.end()))
            i = token.end()
        elif ch in "}]":
            _drop_trailing_comma(out)
            out.append(closers.pop())
            i += 1
            if not closers:
                break  # the value is complete; whatever follows is chatter
        else:
            if ch in "{[":
                closers.append("}" if ch == "{" else "]")
            out.append(ch)
            i += 1
    _drop_trailing_comma(out)
    out.extend(reversed(closers))
    return "".join(out)


def _read_string(text: str, start: int) -> tuple[str, int]:
    """Read a single- or double-quoted string starting at `start`; an unterminated one runs to
    the end of the text. Returns its value and the index after it."""
    quote, i, parts = text[start], start + 1, ['"']
    while i < len(text):
        ch = text[i]
        if ch == quote:
            return json.loads("".join(parts) + '"', strict=False), i + 1
        if ch == "\\" and i + 1 < len(text):
            escaped, used = _escape(text, i + 1)
            parts.append(escaped)
            i += used
            continue
        parts.append('\\"' if ch == '"' else ch)
        i += 1
    return json.loads("".join(parts) + '"', strict=False), len(text)


def _escape(text: str, i: int) -> tuple[str, int]:
    """The strict-JSON form of a backslash escape whose letter is at `i`, and how many
    characters it used. An unknown escape (a Windows path) is a literal backslash."""
    ch = text[i]
    if ch == "'":
        return "'", 2
    if ch in _JSON_ESCAPES or (ch == "u" and _HEX4_RE.match(text, i + 1)):
        return "\\" + ch, 2
    return "\\\\", 1


def _bare_word(word: str, text: str, end: int) -> str:
    if word in _LITERALS:
        return _LITERALS[word]
    if text[end:].lstrip().startswith(":"):
        return json.dumps(word)  # an unquoted key
    raise ValueError(f"unquoted text {word!r} where a value was expected")


def _drop_trailing_comma(out: list[str]) -> None:
    i = len(out) - 1
    while i >= 0 and out[i].isspace():
        i -= 1
    if i >= 0 and out[i] == ",":
        del out[i]


# -- prompting and streaming ----------------------------------------------------------------


_TOOL_PREAMBLE = """# Tools

You can call the tools listed below. To call one, write a block in exactly this form (one block
per call; several blocks in one reply are fine):

```tool_call
{"name": "TOOL_NAME", "arguments": {"ARGUMENT": "VALUE"}}
```

The block holds one JSON object with double-quoted keys and strings, and `arguments` must match
the tool's schema. After your calls, stop and wait: the results come back in the next message as
`Tool result (TOOL_NAME): ...`. Never write tool results yourself. When no tool is needed, answer
normally without any block.

## Available tools"""


def render_tool_instructions(tools: list[dict[str, Any]]) -> str:
    """The system-prompt section that teaches a text-only model to call `tools` (given in the
    OpenAI `{"type": "function", "function": {...}}` shape, or as the inner function dicts)."""
    lines = [_TOOL_PREAMBLE]
    for tool in tools:
        spec = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        schema = spec.get("parameters") or {"type": "object", "properties": {}}
        lines += [
            "",
            f"### {spec.get('name', '?')}",
            str(spec.get("description") or "(no description)").strip(),
            "Arguments (JSON schema): " + json.dumps(schema, ensure_ascii=False),
        ]
    return "\n".join(lines)


_OPENERS = ("```", "<tool_call>", "<function=")
_OPENER_RE = re.compile(r"```[ \t]*(?P<lang>[\w-]*)[^\n]*\n|<tool_call>|<function=")
_PARTIAL_FENCE_RE = re.compile(r"```[^\n]*\Z")


class TextStreamFilter:
    """Forwards streamed reply text while holding back tool-call blocks, so users do not watch
    raw JSON scroll by. Streaming simply stops at the first block that may be a call (the final
    reply still holds everything); ordinary code fences such as ```python pass through."""

    def __init__(self) -> None:
        self._pending = ""
        self._in_code = False
        self._stopped = False

    def feed(self, text: str) -> str:
        """Add streamed text; returns the part that is safe to show now."""
        self._pending += "" if self._stopped else text
        shown: list[str] = []
        while not self._stopped and (cut := self._showable()):
            shown.append(self._pending[:cut])
            self._pending = self._pending[cut:]
        return "".join(shown)

    def flush(self) -> str:
        """At the end of the reply: the held-back tail, unless a block stopped the stream."""
        rest, self._pending = ("" if self._stopped else self._pending), ""
        return rest

    def _showable(self) -> int:
        """How many pending characters can be shown now (0: wait for more text)."""
        text = self._pending
        if self._in_code:
            close = text.find("```")
            self._in_code = close < 0
            return max(0, len(text) - 2) if close < 0 else close + 3  # `` may start a ```
        opener, hold = _OPENER_RE.search(text), _partial_opener(text)
        if opener is None or (hold is not None and hold < opener.start()):
            return len(text) if hold is None else hold
        lang = opener.group("lang")
        if lang is not None and lang.lower() not in _TOOL_FENCES | _MAYBE_TOOL_FENCES:
            self._in_code = True
            return opener.end()
        self._stopped = True
        return opener.start()


def _partial_opener(text: str) -> int | None:
    """Start of an opener that may be cut off at the end of `text`, if any."""
    if fence := _PARTIAL_FENCE_RE.search(text):
        return fence.start()
    starts = range(max(0, len(text) - max(map(len, _OPENERS))), len(text))
    return next((i for i in starts if any(o.startswith(text[i:]) for o in _OPENERS)), None)
