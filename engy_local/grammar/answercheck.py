"""An answer checked against the whole schemas it was asked to follow.

The grammar holds what it can of a schema (schema.py); where it is looser
(a gap: uniqueItems, multipleOf, a fractional bound ...) the finished value
is validated with the `jsonschema` library, Draft 2020-12 with its format
checker, and one that breaks its schema ends the answer as `BrokenAnswer`
(each API's server error) instead of a success. Only schemas with gaps are
checked: the rest validate by construction. A call's arguments are checked
when the call ends, a structured answer's text when the answer ends (an
answer cut by the token limit is not checked: it says it is incomplete).
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Any

from ..errors import BrokenAnswer
from .schema import gaps

log = logging.getLogger("engy.requests")


class AnswerCheck:
    """Validators are built when a call or the answer ends, not before the
    first token: building one reads the metaschema (tens of ms, cold)."""

    def __init__(self, tools: dict[str, dict[str, Any]], output: dict[str, Any] | None) -> None:
        self._tools = tools
        self._output = output

    def call(self, name: str, arguments: str) -> None:
        """Raises BrokenAnswer where a call's arguments break its tool's schema."""
        schema = self._tools.get(name)
        if schema is not None:
            what = f"the arguments of the call to {name}"
            _validate(_validator(json.dumps(schema, sort_keys=True)), arguments, what)

    def answer(self, text: str) -> None:
        """Raises BrokenAnswer where a structured answer breaks its schema."""
        if self._output is not None:
            validator = _validator(json.dumps(self._output, sort_keys=True))
            _validate(validator, text, "the answer")


def answer_check(
    tools: dict[str, dict[str, Any]], output: dict[str, Any] | None
) -> AnswerCheck | None:
    """The check of the schemas among these whose grammar is looser than
    they are; None where every one is held whole."""
    loose = {name: schema for name, schema in tools.items() if gaps(schema)}
    if output is not None and not gaps(output):
        output = None
    if not loose and output is None:
        return None
    return AnswerCheck(loose, output)


@functools.lru_cache(maxsize=64)
def _validator(schema_json: str) -> Any:
    """A validator of a schema (by its JSON: the same tools come every turn).
    jsonschema is imported here, when an answer is first checked: importing
    it costs every `engy` command most of a second."""
    import jsonschema  # type: ignore[import-untyped]

    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError:
        cls = jsonschema.Draft202012Validator  # read as 2020-12 where its draft says no
    return cls(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def _validate(validator: Any, text: str, what: str) -> None:
    from jsonschema.exceptions import best_match  # type: ignore[import-untyped]

    try:
        value = json.loads(text, strict=False)  # raw newlines in strings: code
    except ValueError as exc:
        raise BrokenAnswer(f"{what} is not JSON: {exc}") from None
    try:
        error = best_match(validator.iter_errors(value))
    except Exception:  # a $ref it cannot follow, a pattern Python cannot read
        log.warning("%s could not be checked against its schema", what, exc_info=True)
        return  # the grammar's reading stands
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "the top"
        raise BrokenAnswer(
            f"{what} does not follow its schema: {error.message} (at {where}; "
            f"the model broke {error.validator}, which the grammar could not hold)"
        )
