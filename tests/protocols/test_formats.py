"""Structured outputs on the three APIs: each one's answer format (as the
official SDKs send it) becomes the same neutral `JsonOutput`; a bad value
is a 400 in that API's own error format naming the field; the Responses
object echoes `text.format`."""

from __future__ import annotations

from typing import Any

import pytest

from engy_local import errors
from engy_local.chat import JsonOutput
from engy_local.protocols import anthropic, chat_completions, responses
from engy_local.protocols.responses_render import envelope

# What pydantic makes of a model with a nested object, an array, an enum and
# an optional field, as both SDKs send it (shortened).
PERSON: dict[str, Any] = {
    "$defs": {
        "Kind": {"enum": ["mathematician", "poet"], "type": "string"},
        "Place": {
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "type": "object",
            "additionalProperties": False,
        },
    },
    "properties": {
        "name": {"type": "string"},
        "kind": {"$ref": "#/$defs/Kind"},
        "born_in": {"$ref": "#/$defs/Place"},
        "tags": {"items": {"type": "string"}, "type": "array"},
        "nickname": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["name", "kind", "born_in", "tags", "nickname"],
    "type": "object",
    "additionalProperties": False,
}
TITLE = {
    "type": "object",
    "properties": {"title": {"type": "string"}},
    "required": ["title"],
    "additionalProperties": False,
}


def messages_body(**fields: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi"}],
        **fields,
    }


def responses_body(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "input": "hi", **fields}


def chat_body(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}


# ---- /v1/messages -------------------------------------------------------------------

MESSAGES_CASES: list[tuple[str, dict[str, Any], JsonOutput | None]] = [
    ("none", {}, None),
    # anthropic 2.17 messages.parse(output_format=Model)
    (
        "output_config.format",
        {"output_config": {"format": {"type": "json_schema", "schema": PERSON}}},
        JsonOutput(PERSON),
    ),
    # Claude Code 2.1.332's session-title side request
    (
        "with effort",
        {"output_config": {"effort": "high", "format": {"type": "json_schema", "schema": TITLE}}},
        JsonOutput(TITLE),
    ),
    ("effort alone", {"output_config": {"effort": "high"}}, None),
    ("format null", {"output_config": {"format": None}}, None),
    # the older beta SDKs
    (
        "beta output_format",
        {"output_format": {"type": "json_schema", "schema": TITLE}},
        JsonOutput(TITLE),
    ),
    (
        "output_config wins",
        {
            "output_config": {"format": {"type": "json_schema", "schema": PERSON}},
            "output_format": {"type": "json_schema", "schema": TITLE},
        },
        JsonOutput(PERSON),
    ),
]


@pytest.mark.parametrize(
    ("fields", "expected"), [c[1:] for c in MESSAGES_CASES], ids=[c[0] for c in MESSAGES_CASES]
)
def test_messages_format(fields: dict[str, Any], expected: JsonOutput | None) -> None:
    assert anthropic.parse_request(messages_body(**fields)).chat.json_output == expected


MESSAGES_BAD: list[tuple[dict[str, Any], str]] = [
    ({"output_config": "json"}, "output_config"),
    ({"output_config": {"format": "json"}}, "output_config.format"),
    ({"output_config": {"format": {"schema": TITLE}}}, "output_config.format.type"),
    (
        {"output_config": {"format": {"type": "json_object", "schema": TITLE}}},
        "output_config.format.type",
    ),
    ({"output_config": {"format": {"type": "json_schema"}}}, "output_config.format.schema"),
    (
        {"output_config": {"format": {"type": "json_schema", "schema": [TITLE]}}},
        "output_config.format.schema",
    ),
    ({"output_format": {"type": "text"}}, "output_format.type"),
    ({"output_format": {"type": "json_schema", "schema": "{}"}}, "output_format.schema"),
]


@pytest.mark.parametrize(("fields", "param"), MESSAGES_BAD, ids=[c[1] for c in MESSAGES_BAD])
def test_messages_bad_format_is_an_anthropic_400(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(errors.InvalidRequest) as info:
        anthropic.parse_request(messages_body(**fields))
    assert info.value.param == param
    status, body, _ = anthropic.error_body(info.value)
    assert status == 400
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith(param)


# ---- /v1/responses --------------------------------------------------------------

# openai 3.63 responses.parse(text_format=Model)
SDK_FORMAT = {"type": "json_schema", "name": "Person", "schema": PERSON, "strict": True}
# strict and where the schema stands: a schema the grammar cannot hold whole is a 400
STRICT_PERSON = JsonOutput(PERSON, strict=True, field="text.format.schema")

RESPONSES_CASES: list[tuple[str, dict[str, Any], JsonOutput | None, dict[str, Any]]] = [
    ("none", {}, None, {"type": "text"}),
    ("text", {"text": {"format": {"type": "text"}}}, None, {"type": "text"}),
    ("verbosity alone", {"text": {"verbosity": "low"}}, None, {"type": "text"}),
    ("json_schema", {"text": {"format": SDK_FORMAT}}, STRICT_PERSON, SDK_FORMAT),
    (
        "json_schema, no name or strict",
        {"text": {"format": {"type": "json_schema", "schema": TITLE}}},
        JsonOutput(TITLE, field="text.format.schema"),
        {"type": "json_schema", "name": "response", "schema": TITLE, "strict": None},
    ),
    (
        "with a description",
        {"text": {"format": {**SDK_FORMAT, "description": "a person"}}},
        STRICT_PERSON,
        {**SDK_FORMAT, "description": "a person"},
    ),
    (
        "json_object",
        {"text": {"format": {"type": "json_object"}}},
        JsonOutput(),
        {"type": "json_object"},
    ),
]


@pytest.mark.parametrize(
    ("fields", "expected", "echoed"),
    [c[1:] for c in RESPONSES_CASES],
    ids=[c[0] for c in RESPONSES_CASES],
)
def test_responses_format_and_its_echo(
    fields: dict[str, Any], expected: JsonOutput | None, echoed: dict[str, Any]
) -> None:
    parsed = responses.parse_request(responses_body(**fields))
    assert parsed.chat.json_output == expected
    response = envelope(parsed, "resp_1", 1700000000, "completed", [])
    assert response["text"] == {"format": echoed}


def test_responses_echo_is_what_the_sdk_reads() -> None:
    from openai.types.responses import Response

    parsed = responses.parse_request(responses_body(text={"format": SDK_FORMAT}))
    response = Response.model_validate(envelope(parsed, "resp_1", 1700000000, "completed", []))
    assert response.text is not None and response.text.format is not None
    assert response.text.format.type == "json_schema"


RESPONSES_BAD: list[tuple[dict[str, Any], str]] = [
    ({"text": "json"}, "text"),
    ({"text": {"format": "json_object"}}, "text.format"),
    ({"text": {"format": {}}}, "text.format.type"),
    ({"text": {"format": {"type": "yaml"}}}, "text.format.type"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ({"text": {"format": {"type": "json_schema", "schema": True}}}, "text.format.schema"),
    ({"text": {"format": {"type": "json_schema", "schema": {}, "name": 3}}}, "text.format.name"),
    (
        {"text": {"format": {"type": "json_schema", "schema": {}, "strict": "y"}}},
        "text.format.strict",
    ),
]


@pytest.mark.parametrize(("fields", "param"), RESPONSES_BAD, ids=[c[1] for c in RESPONSES_BAD])
def test_responses_bad_format_is_an_openai_400(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(errors.InvalidRequest) as info:
        responses.parse_request(responses_body(**fields))
    assert info.value.param == param
    status, body, _ = responses.error_body(info.value)
    assert status == 400
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["param"] == param
    assert body["error"]["message"].startswith(param)


# ---- the same request on all three ------------------------------------------------


def test_one_neutral_form_for_all_three() -> None:
    on_messages = anthropic.parse_request(
        messages_body(output_config={"format": {"type": "json_schema", "schema": PERSON}})
    )
    on_responses = responses.parse_request(responses_body(text={"format": SDK_FORMAT}))
    on_chat = chat_completions.parse_request(
        chat_body(
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "Person", "schema": PERSON, "strict": True},
            }
        )
    )
    outputs = [
        on_messages.chat.json_output,
        on_responses.chat.json_output,
        on_chat.chat.json_output,
    ]
    assert [o.schema if o else None for o in outputs] == [PERSON] * 3
    assert [o.strict if o else None for o in outputs] == [False, True, True]
