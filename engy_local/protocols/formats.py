"""The answer formats of the three APIs (structured outputs) -> `JsonOutput`.

Pure translation. Each API names the same request differently:

- Messages: `output_config.format` (the older beta SDKs: a top-level
  `output_format`), `{type: json_schema, schema}`;
- Responses: `text.format`, `{type: json_schema, name, schema, strict}`,
  `{type: json_object}` or `{type: text}`;
- Chat Completions: `response_format`, `{type: json_schema, json_schema:
  {name, schema, strict}}`, `{type: json_object}` or `{type: text}`.

`text` (or no format) is free text: None. `json_object` is any JSON object:
`JsonOutput()`. `json_schema` carries its schema (a json_schema without one,
which Chat Completions allows, is any object) and `strict`: the grammar
holds the answer to the schema as far as grammar/schema.py can say it; what
it cannot is refused under `strict` and checked after the answer otherwise
(grammar/answercheck.py; docs/clients.md, keyword by keyword). A bad value
is an `InvalidRequest` naming the field, which each protocol renders in its
own error format.
"""

from __future__ import annotations

from typing import Any

from ..chat import JsonOutput
from ..errors import InvalidRequest
from . import fields as f


def messages_format(body: dict[str, Any]) -> JsonOutput | None:
    """/v1/messages: `output_config.format`, else the beta `output_format`."""
    config = body.get("output_config")
    if config is not None:
        fmt = f.obj(config, "output_config").get("format")
        if fmt is not None:
            return _anthropic(fmt, "output_config.format")
    fmt = body.get("output_format")
    return None if fmt is None else _anthropic(fmt, "output_format")


def _anthropic(value: Any, path: str) -> JsonOutput:
    fmt = f.obj(value, path)
    kind = f.string(fmt, "type", f"{path}.type")
    if kind != "json_schema":
        raise InvalidRequest(f"{path}.type: expected json_schema, got {kind!r}", f"{path}.type")
    schema = f.obj(f.required(fmt, "schema", f"{path}.schema"), f"{path}.schema")
    return JsonOutput(schema)


def responses_format(body: dict[str, Any]) -> tuple[JsonOutput | None, dict[str, Any]]:
    """/v1/responses: `text.format`, and the format the Response object
    echoes (`{"type": "text"}` when none was asked for)."""
    text = body.get("text")
    if text is None:
        return None, {"type": "text"}
    fmt = f.obj(text, "text").get("format")
    if fmt is None:
        return None, {"type": "text"}
    d = f.obj(fmt, "text.format")
    kind = f.string(d, "type", "text.format.type")
    if kind == "text":
        return None, {"type": "text"}
    if kind == "json_object":
        return JsonOutput(), {"type": "json_object"}
    if kind == "json_schema":
        schema = f.obj(f.required(d, "schema", "text.format.schema"), "text.format.schema")
        name = f.string(d, "name", "text.format.name", "response")
        echo: dict[str, Any] = {"type": "json_schema", "name": name, "schema": schema}
        description = f.string(d, "description", "text.format.description", None)
        if description is not None:
            echo["description"] = description
        strict = f.boolean(d, "strict", "text.format.strict", None)
        echo["strict"] = strict
        return JsonOutput(schema, strict=bool(strict), field="text.format.schema"), echo
    raise InvalidRequest(
        f"text.format.type: expected text, json_object or json_schema, got {kind!r}",
        "text.format.type",
    )


def chat_format(value: Any) -> JsonOutput | None:
    """/v1/chat/completions: `response_format`."""
    if value is None:
        return None
    fmt = f.obj(value, "response_format")
    kind = f.string(fmt, "type", "response_format.type")
    if kind == "text":
        return None
    if kind == "json_object":
        return JsonOutput()
    if kind == "json_schema":
        spec = f.obj(
            f.required(fmt, "json_schema", "response_format.json_schema"),
            "response_format.json_schema",
        )
        schema = spec.get("schema")
        if schema is None:
            return JsonOutput()
        path = "response_format.json_schema"
        strict = bool(f.boolean(spec, "strict", f"{path}.strict", None))
        return JsonOutput(f.obj(schema, f"{path}.schema"), strict=strict, field=f"{path}.schema")
    raise InvalidRequest(
        f"response_format.type: expected text, json_object or json_schema, got {kind!r}",
        "response_format.type",
    )
