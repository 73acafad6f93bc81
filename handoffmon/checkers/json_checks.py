"""JSON checkers: valid JSON, JSON Schema conformance, pydantic-model conformance."""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from typing import Any

from handoffmon.checkers.base import (
    PASS,
    CheckContext,
    CheckFn,
    CheckOutcome,
    ParamError,
    Params,
)

_FENCES = ("```json", "```Json", "```JSON", "```")


def strip_fence(text: str) -> str:
    """Remove surrounding whitespace and one markdown code fence (```json … ```)."""
    text = text.strip()
    for fence in _FENCES:
        if text.startswith(fence):
            text = text[len(fence) :]
            break
    if text.endswith("```"):
        text = text[:-3]
    return text.strip()


def parse_json(text: str, *, fenced: bool) -> tuple[Any, CheckOutcome | None]:
    """Parse ``text``; on failure return a ``fail`` outcome instead of raising.

    Deeply nested input (e.g. 10,000 ``[``) makes the parser raise ``RecursionError``;
    that is a failed reply (``json_too_deep``), not a crashed checker. ``NaN``, ``Infinity``
    and ``-Infinity``, which Python's parser takes but JSON (RFC 8259) has not, fail as
    ``invalid_json``: a strict consumer of the reply would refuse them.
    """
    body = strip_fence(text) if fenced else text
    if not body.strip():
        return None, CheckOutcome("fail", "empty_json")
    try:
        return json.loads(body, parse_constant=_not_json), None
    except RecursionError:
        return None, CheckOutcome("fail", "json_too_deep")
    except ValueError:
        return None, CheckOutcome("fail", "invalid_json")


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _fence_param(p: Params) -> bool:
    return bool(p.bool("allow_code_fence", True))


def schema_reason(error: Any) -> str:
    """``schema:{keyword}@{path in the schema}`` of a jsonschema ``ValidationError``.

    Built from the schema side only: the failing keyword and where it sits in the schema
    (``properties/age/type``). The path into the reply (``error.absolute_path``) is never
    used: its keys are whatever the model wrote, and reasons leave the process (OTel
    ``gen_ai.evaluation.explanation``, the turn log's ``reasons``).
    """
    where = "/".join(str(x) for x in error.absolute_schema_path) or "<root>"
    return f"schema:{error.validator}@{where}"[:120]


def model_reason(error: Mapping[str, Any] | None) -> str:
    """``model:{error type}@{location}`` of a pydantic error, keeping array indices only.

    A pydantic ``loc`` mixes field names with dict keys and union branches taken from the
    reply, which cannot be told apart, so every non-integer step is written ``*``
    (``model:int_parsing@*/2/*``): no text the model wrote leaves the process.
    """
    if error is None:
        return "model:invalid@<root>"
    loc = "/".join(str(x) if type(x) is int else "*" for x in error.get("loc", ()))
    return f"model:{error.get('type', 'invalid')}@{loc or '<root>'}"[:120]


def valid_json(p: Params) -> CheckFn:
    """The reply parses as JSON (RFC 8259: no ``NaN`` or ``Infinity``). Params: allow_code_fence
    (true: a ```json fence is stripped)."""
    fenced = _fence_param(p)

    def check(reply: str, ctx: CheckContext) -> CheckOutcome:
        _, failure = parse_json(reply, fenced=fenced)
        return failure or PASS

    return check


def json_schema(p: Params) -> CheckFn:
    """The reply is JSON valid against ``schema`` (a JSON Schema mapping; draft from ``$schema``).

    Params: schema, allow_code_fence (true).
    """
    from jsonschema import exceptions, validators

    schema = p.raw("schema")
    if not isinstance(schema, dict):
        raise ParamError("schema", "must be a JSON Schema object (a mapping)")
    cls = validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except exceptions.SchemaError as exc:
        raise ParamError("schema", f"invalid JSON Schema: {exc.message}") from exc
    validator = cls(schema)
    fenced = _fence_param(p)

    def check(reply: str, ctx: CheckContext) -> CheckOutcome:
        data, failure = parse_json(reply, fenced=fenced)
        if failure:
            return failure
        try:
            error = exceptions.best_match(validator.iter_errors(data))
        except RecursionError:
            return CheckOutcome("fail", "json_too_deep")
        if error is None:
            return PASS
        return CheckOutcome("fail", schema_reason(error))

    return check


def load_model(spec: str) -> Any:
    """Import ``"package.module:ClassName"`` and check it is a pydantic model class."""
    from pydantic import BaseModel

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ParamError("model", f"expected 'module:Class', got {spec!r}")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ParamError("model", f"cannot import {spec!r}: {exc}") from exc
    if not (isinstance(obj, type) and issubclass(obj, BaseModel)):
        raise ParamError("model", f"{spec!r} is not a pydantic BaseModel subclass")
    return obj


def pydantic_model(p: Params) -> CheckFn:
    """The reply is JSON that validates as ``model`` ("module:Class").

    Params: model, strict (false), allow_code_fence (true).
    """
    from pydantic import ValidationError

    model = load_model(p.str("model"))
    strict = p.bool("strict", False)
    fenced = _fence_param(p)

    def check(reply: str, ctx: CheckContext) -> CheckOutcome:
        body = strip_fence(reply) if fenced else reply
        if not body.strip():
            return CheckOutcome("fail", "empty_json")
        try:
            model.model_validate_json(body, strict=strict)
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_input=False, include_context=False)
            return CheckOutcome("fail", model_reason(errors[0] if errors else None))
        except RecursionError:
            return CheckOutcome("fail", "json_too_deep")
        return PASS

    return check
