"""parse_text_tool_calls, load_lenient_json, render_tool_instructions and TextStreamFilter."""

from __future__ import annotations

import json

import pytest

from soulflow.agent.toolcall_text import (
    TextStreamFilter,
    load_lenient_json,
    parse_text_tool_calls,
    render_tool_instructions,
)
from soulflow.contracts import ToolCall

KNOWN = {"get_weather", "search"}
WEATHER = ToolCall("call_text_1", "get_weather", {"city": "Paris"})


def only_call(text: str) -> ToolCall:
    parsed = parse_text_tool_calls(text, KNOWN)
    assert parsed.errors == []
    assert len(parsed.calls) == 1, parsed
    return parsed.calls[0]


# -- accepted shapes ------------------------------------------------------------------------

CALL_JSON = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
SHAPES = {
    "tool_call fence": '```tool_call\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```',
    "json fence": '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```',
    "unlabelled fence": '```\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```',
    "hermes tag": f"<tool_call>\n{CALL_JSON}\n</tool_call>",
    "tag around fence": '<tool_call>\n```json\n{"name": "get_weather", "arguments": '
                        '{"city": "Paris"}}\n```\n</tool_call>',
    "function tag": '<function=get_weather>{"city": "Paris"}</function>',
    "function parameters": "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                           "</function>",
    "bare tool/args": '{"tool": "get_weather", "args": {"city": "Paris"}}',
    "bare tool/parameters": '  {"tool": "get_weather", "parameters": {"city": "Paris"}}\n',
    "bare name/arguments": '{"name": "get_weather", "arguments": {"city": "Paris"}}',
    "openai wire shape": '```tool_call\n{"type": "function", "function": {"name": "get_weather",'
                         ' "arguments": "{\\"city\\": \\"Paris\\"}"}}\n```',
    "unclosed fence at end": f"```tool_call\n{CALL_JSON}",
    "unclosed tag at end": f"<tool_call>{CALL_JSON}",
}


@pytest.mark.parametrize("text", SHAPES.values(), ids=SHAPES.keys())
def test_accepted_shapes(text: str) -> None:
    parsed = parse_text_tool_calls(text, KNOWN)
    assert parsed == type(parsed)(calls=[WEATHER], remaining_text="", errors=[])


def test_function_parameters_decode_json_values() -> None:
    text = "<function=search><parameter=q>cats and dogs</parameter><parameter=limit>5</parameter>"
    assert only_call(text).arguments == {"q": "cats and dogs", "limit": 5}


def test_function_tag_without_arguments() -> None:
    assert only_call("<function=search></function>") == ToolCall("call_text_1", "search", {})


# -- malformed JSON that can be repaired ----------------------------------------------------

REPAIRS = {
    "trailing commas": '{"name": "search", "arguments": {"q": "x", "tags": [1, 2,],},}',
    "single quotes": "{'name': 'search', 'arguments': {'q': 'it\\'s \"quoted\"'}}",
    "unquoted keys": '{name: "search", arguments: {q: "x", max_results: 3}}',
    "python literals": '{"name": "search", "arguments": {"q": "x", "a": True, "b": False, '
                       '"c": None}}',
    "missing closing braces": '{"name": "search", "arguments": {"q": "x"',
    "arguments as a JSON string": '{"name": "search", "arguments": "{\\"q\\": \\"x\\"}"}',
    "arguments as a sloppy string": "{\"name\": \"search\", \"arguments\": \"{'q': 'x',}\"}",
    "chatter after the object": '{"name": "search", "arguments": {"q": "x"}} hope that helps',
    "literal newline in a string": '{"name": "search", "arguments": {"q": "line1\nline2"}}',
}
REPAIRED = {
    "trailing commas": {"q": "x", "tags": [1, 2]},
    "single quotes": {"q": "it's \"quoted\""},
    "unquoted keys": {"q": "x", "max_results": 3},
    "python literals": {"q": "x", "a": True, "b": False, "c": None},
    "literal newline in a string": {"q": "line1\nline2"},
}


@pytest.mark.parametrize("case", REPAIRS)
def test_malformed_json_is_repaired(case: str) -> None:
    call = only_call(f"```tool_call\n{REPAIRS[case]}\n```")
    assert call.name == "search"
    assert call.arguments == REPAIRED.get(case, {"q": "x"})


def test_lenient_json_details() -> None:
    text = "{'path': 'C:\\dir', n: -1.5e3, ok: True, none: None, list: [1, 2,], 'nested': {'a': 1"
    assert load_lenient_json(text) == {
        "path": "C:\\dir", "n": -1500.0, "ok": True, "none": None, "list": [1, 2],
        "nested": {"a": 1},
    }
    assert load_lenient_json('{"a": [1, 2}') == {"a": [1, 2]}  # a mismatched closer
    with pytest.raises(ValueError):
        load_lenient_json("no json here")
    with pytest.raises(ValueError):
        load_lenient_json("{city: Paris}")  # an unquoted value is beyond guessing


# -- failures: recorded as errors, raw text kept --------------------------------------------

GARBAGE = {
    "unquoted values": "```tool_call\n{name: get_weather, arguments: {city: Paris}}\n```",
    "not json at all": "```tool_call\nplease call the weather tool\n```",
    "tag with prose": "<tool_call>get_weather(city='Paris')</tool_call>",
    "no name": '<tool_call>{"arguments": {"city": "Paris"}}</tool_call>',
    "arguments not an object": '<tool_call>{"name": "search", "arguments": [1, 2]}</tool_call>',
    "arguments string not json": '<tool_call>{"name": "search", "arguments": "q=x"}</tool_call>',
    "function body garbage": "<function=search>q equals x</function>",
    "callish json fence": '```json\n{"name": "search", "arguments": {q: x}}\n```',
}


@pytest.mark.parametrize("text", GARBAGE.values(), ids=GARBAGE.keys())
def test_unrecoverable_block_is_an_error_and_kept(text: str) -> None:
    parsed = parse_text_tool_calls(f"Let me check.\n{text}", KNOWN)
    assert parsed.calls == []
    assert len(parsed.errors) == 1
    assert parsed.remaining_text == f"Let me check.\n{text}"


def test_unparsable_bare_call_is_an_error() -> None:
    text = '{"tool": "search", "args": {q: x}}'
    parsed = parse_text_tool_calls(text, KNOWN)
    assert (parsed.calls, len(parsed.errors), parsed.remaining_text) == ([], 1, text)


def test_bare_object_counts_only_as_the_whole_reply() -> None:
    text = 'Like this: {"tool": "search", "args": {"q": "x"}}'
    assert parse_text_tool_calls(text, KNOWN).calls == []


def test_error_message_quotes_the_bad_call() -> None:
    parsed = parse_text_tool_calls(GARBAGE["unquoted values"])
    assert parsed.errors == [
        "tool call is not valid JSON: {name: get_weather, arguments: {city: Paris}}"
    ]


def test_unknown_tool_is_an_error_not_a_call() -> None:
    text = '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>'
    parsed = parse_text_tool_calls(text, KNOWN)
    assert parsed.calls == []
    assert parsed.errors == ["unknown tool 'rm_rf'; available tools: get_weather, search"]
    assert parsed.remaining_text == text
    assert parse_text_tool_calls(text).calls == [ToolCall("call_text_1", "rm_rf", {})]


# -- ordinary text stays text ---------------------------------------------------------------

NOT_CALLS = {
    "plain prose": "The weather in Paris is mild.",
    "json answer": '```json\n{"name": "Bob", "age": 3}\n```',
    "python fence": "```python\nprint({'name': 'x', 'arguments': {}})\n```",
    "bare json data": '{"name": "Bob", "age": 3}',
    "broken json fence": "```json\n{oops\n```",
    "schema": '{"type": "object", "properties": {"parameters": {"type": "string"}}}',
}


@pytest.mark.parametrize("text", NOT_CALLS.values(), ids=NOT_CALLS.keys())
def test_ordinary_text_is_left_alone(text: str) -> None:
    parsed = parse_text_tool_calls(text, KNOWN)
    assert (parsed.calls, parsed.errors, parsed.remaining_text) == ([], [], text)


def test_multiple_calls_and_surrounding_text() -> None:
    text = (
        "I'll look both up.\n\n"
        '```tool_call\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```\n\n'
        "```python\nx = 1\n```\n"
        '<tool_call>{"name": "search", "arguments": {"q": "Paris events"}}</tool_call>\n\n\n'
        '<function=search>{"q": "bad",}</function>\n'
        "<tool_call>{broken</tool_call>\n"
        "Back soon."
    )
    parsed = parse_text_tool_calls(text, KNOWN)
    assert parsed.calls == [
        WEATHER,
        ToolCall("call_text_2", "search", {"q": "Paris events"}),
        ToolCall("call_text_3", "search", {"q": "bad"}),
    ]
    assert len(parsed.errors) == 1
    assert parsed.remaining_text == (
        "I'll look both up.\n\n```python\nx = 1\n```\n\n<tool_call>{broken</tool_call>\n"
        "Back soon."
    )


def test_id_prefix() -> None:
    text = "<function=search></function><function=search></function>"
    ids = [call.id for call in parse_text_tool_calls(text, id_prefix="turn7_").calls]
    assert ids == ["turn7_1", "turn7_2"]


def test_a_list_of_calls_in_one_block() -> None:
    text = ('<tool_call>[{"name": "search", "arguments": {"q": "a"}}, '
            '{"name": "search", "arguments": {"q": "b"}}]</tool_call>')
    parsed = parse_text_tool_calls(text, KNOWN)
    assert [call.arguments for call in parsed.calls] == [{"q": "a"}, {"q": "b"}]
    assert [call.id for call in parsed.calls] == ["call_text_1", "call_text_2"]


# -- instructions ---------------------------------------------------------------------------


def test_render_tool_instructions_lists_each_tool() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    tools = [
        {"type": "function", "function": {"name": "get_weather",
                                          "description": "Current weather.", "parameters": schema}},
        {"name": "search"},  # the bare function shape, no description or schema
    ]
    text = render_tool_instructions(tools)
    assert "```tool_call" in text
    expected = "### get_weather\nCurrent weather.\nArguments (JSON schema): " + json.dumps(schema)
    assert expected in text
    assert "### search\n(no description)" in text
    assert "Tool result (TOOL_NAME)" in text


def test_the_documented_example_parses() -> None:
    """The format the instructions teach must be the one the parser reads best."""
    text = render_tool_instructions([])
    example = text[text.index("```tool_call") : text.index("```", text.index("```tool_call") + 3)]
    parsed = parse_text_tool_calls(example + "```")
    assert parsed.calls == [ToolCall("call_text_1", "TOOL_NAME", {"ARGUMENT": "VALUE"})]


# -- stream filter --------------------------------------------------------------------------


def feed_all(pieces: list[str]) -> str:
    gate = TextStreamFilter()
    return "".join(gate.feed(piece) for piece in pieces) + gate.flush()


def test_stream_filter_passes_plain_text_through_as_it_comes() -> None:
    gate = TextStreamFilter()
    assert gate.feed("Hello ") == "Hello "
    assert gate.feed("world") == "world"
    assert gate.flush() == ""


@pytest.mark.parametrize("opener", ["```tool_call\n", "<tool_call>", "<function=x>", "```json\n"])
def test_stream_filter_stops_at_a_tool_block(opener: str) -> None:
    text = f"Checking.\n{opener}{{\"name\": \"x\", \"arguments\": {{}}}}\nmore"
    # one character at a time: openers split across chunks must still be caught
    assert feed_all(list(text)) == "Checking.\n"
    assert feed_all([text]) == "Checking.\n"


def test_stream_filter_lets_code_fences_through() -> None:
    text = "Code:\n```python\nprint('x')\n```\nand ``inline`` <b>bold</b> done"
    assert feed_all(list(text)) == text
    assert feed_all([text]) == text
