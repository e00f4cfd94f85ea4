"""Parsing what an OpenAI-compatible server sends back: JSON completions and SSE streams.

Pure functions (no I/O), so the provider's network code and the parsing can be read and
tested apart. Failures raise `ParseError` with a normalised kind.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from soulflow.contracts import ProviderError, ProviderResult, ToolCall, Usage

SNIPPET_CHARS = 200


class ParseError(ProviderError):
    """Raised by the pure parsers below, which do not know the provider's name: a
    `ProviderError` of `kind` without a provider, which the provider raises again as its own
    (with its name, its key scrubbed from the message)."""


@dataclass(slots=True)
class _ToolCallBuffer:
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass(slots=True)
class StreamAccumulator:
    """Folds SSE lines into what a non-streaming response would have said.

    `feed` returns the text delta (if any) of one line so the caller can forward it at once.
    """

    content: list[str] = field(default_factory=list)
    tool_calls: dict[int, _ToolCallBuffer] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    done: bool = False

    def feed(self, line: str) -> str:
        line = line.strip()
        if not line or line.startswith(":"):
            return ""
        name, _, value = line.partition(":")
        if name in {"event", "id", "retry"}:
            return ""
        if name != "data":
            raise ParseError("bad_response", f"unexpected stream line: {snippet(line)}")
        value = value.strip()
        if value == "[DONE]":
            self.done = True
            return ""
        chunk = loads_json(value)
        if not isinstance(chunk, dict):
            raise ParseError("bad_response", f"stream chunk is not an object: {snippet(value)}")
        if "error" in chunk:
            raise ParseError("server", f"the stream reported an error: {snippet(chunk)}")
        return self._apply(chunk)

    def _apply(self, chunk: dict[str, Any]) -> str:
        if isinstance(chunk.get("usage"), dict):
            self.usage = _parse_usage(chunk["usage"])
        text = ""
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
            delta = choice.get("delta") or {}
            for call in delta.get("tool_calls") or []:
                self._merge_tool_delta(call)
            text += delta.get("content") or ""
        if text:
            self.content.append(text)
        return text

    def _merge_tool_delta(self, call: Any) -> None:
        """Tool calls arrive in fragments keyed by `index`: id and name once, arguments in parts."""
        if not isinstance(call, dict):
            return
        index = call.get("index")
        buf = self.tool_calls.setdefault(index if isinstance(index, int) else 0, _ToolCallBuffer())
        buf.id = buf.id or str(call.get("id") or "")
        function = call.get("function") or {}
        buf.name = buf.name or str(function.get("name") or "")
        buf.arguments += str(function.get("arguments") or "")

    def result(self) -> ProviderResult:
        if not self.done and self.finish_reason is None:
            raise ParseError("bad_response", "the stream ended before [DONE]")
        calls = [
            ToolCall(id=buf.id, name=buf.name, arguments=parse_tool_arguments(buf.arguments))
            for _, buf in sorted(self.tool_calls.items())
        ]
        return ProviderResult(
            content="".join(self.content),
            tool_calls=calls,
            usage=self.usage,
            finish_reason=self.finish_reason,
        )


def parse_completion(body: Any) -> ProviderResult:
    """Parse a non-streaming chat completion body (raises ParseError when malformed)."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ParseError("bad_response", f"response has no choices: {snippet(body)}")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise ParseError("bad_response", f"choice has no message: {snippet(body)}")
    calls = []
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        function = call.get("function") or {}
        name, arguments = str(function.get("name") or ""), function.get("arguments")
        calls.append(ToolCall(str(call.get("id") or ""), name, parse_tool_arguments(arguments)))
    return ProviderResult(
        content=message.get("content") or "",
        tool_calls=calls,
        usage=_parse_usage(body.get("usage")),
        finish_reason=choices[0].get("finish_reason"),
        model=str(body.get("model") or ""),
    )


def parse_tool_arguments(raw: Any) -> dict[str, Any] | str:
    """Tool arguments as a dict when they are a JSON object; otherwise the raw text, so the
    agent can show the model its own malformed call instead of losing it."""
    if isinstance(raw, dict):
        return raw
    text = "" if raw is None else str(raw)
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a delta-seconds Retry-After header; None (use backoff) for anything else."""
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def loads_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise ParseError("bad_response", f"response is not valid JSON: {snippet(text)}") from None


def _parse_usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    nums = [raw.get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens")]
    counts = [max(0, int(n)) if isinstance(n, int | float) and not isinstance(n, bool)
              and math.isfinite(n) else 0 for n in nums]
    cost = raw.get("cost")  # OpenRouter: the call's price in USD
    priced = (float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool)
              and math.isfinite(cost) and cost >= 0 else None)
    return Usage(counts[0], counts[1], counts[2], priced)




def snippet(body: Any) -> str:
    """A short single-line excerpt of a body; prefers an OpenAI-style `error.message`."""
    if not isinstance(body, str):
        body = json.dumps(body, default=str)
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        body = str(parsed["error"].get("message") or body)
    text = " ".join(body.split())
    return text if len(text) <= SNIPPET_CHARS else text[: SNIPPET_CHARS - 3] + "..."
