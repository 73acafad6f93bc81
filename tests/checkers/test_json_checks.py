"""JSON validity, JSON Schema and pydantic-model conformance."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from handoffmon.checkers import CheckContext, CheckOutcome, ParamError, default_registry

REG = default_registry()
SCHEMA = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
}


class Person(BaseModel):
    """A model importable as tests.checkers.test_json_checks:Person."""

    name: str
    age: int = 0


def run(kind: str, reply: str, **params: object) -> tuple[str, str]:
    out = REG.build(kind, params)(reply, CheckContext())
    return out.verdict, out.reason


def test_valid_json_with_and_without_fence() -> None:
    """A ```json fence is stripped unless disabled; trailing garbage fails."""
    assert run("valid_json", '{"a": [1, 2]}')[0] == "pass"
    assert run("valid_json", '```json\n{"a": 1}\n```')[0] == "pass"
    assert run("valid_json", '```json\n{"a": 1}\n```', allow_code_fence=False)[0] == "fail"
    assert run("valid_json", '{"a": 1} trailing') == ("fail", "invalid_json")


def test_json_schema() -> None:
    """Schema violations fail with a reason naming the failing keyword and its place in the schema."""
    assert run("json_schema", '{"name": "Ann", "age": 3}', schema=SCHEMA)[0] == "pass"
    verdict, reason = run("json_schema", '{"name": "Ann", "age": "3"}', schema=SCHEMA)
    assert verdict == "fail" and reason == "schema:type@properties/age/type"
    assert run("json_schema", '{"age": 3}', schema=SCHEMA)[1] == "schema:required@required"
    assert run("json_schema", "not json", schema=SCHEMA) == ("fail", "invalid_json")


def test_invalid_schema_fails_at_build() -> None:
    """A schema that is not a valid JSON Schema is rejected naming the 'schema' key."""
    with pytest.raises(ParamError) as e:
        REG.build("json_schema", {"schema": {"type": "no-such-type"}})
    assert e.value.key == "schema"


def test_pydantic_model() -> None:
    """The model is imported from 'module:Class'; validation errors give type and location."""
    spec = f"{__name__}:Person"
    assert run("pydantic_model", '{"name": "Ann"}', model=spec)[0] == "pass"
    verdict, reason = run("pydantic_model", '{"name": "Ann", "age": "x"}', model=spec)
    assert verdict == "fail" and reason == "model:int_parsing@*"
    assert run("pydantic_model", "", model=spec) == ("fail", "empty_json")


CANARY = "CANARYKEY_ssn_123456789"


class Scores(BaseModel):
    """Keys of ``by_name`` and the list's items come from the reply."""

    by_name: dict[str, int]
    items: list[dict[str, int]] = []


def test_reasons_never_carry_reply_keys() -> None:
    """Keys the model wrote (a dict key, a nested key) never appear in a reason: only the
    schema's keyword and path, and pydantic's error type with array indices."""
    inner = {"type": "object", "additionalProperties": {"type": "integer"}}
    schema = {"type": "object", "additionalProperties": inner}
    verdict, reason = run("json_schema", json.dumps({CANARY: {CANARY: "x"}}), schema=schema)
    assert verdict == "fail" and CANARY not in reason
    assert reason == "schema:type@additionalProperties/additionalProperties/type"
    spec = f"{__name__}:Scores"
    verdict, reason = run("pydantic_model", json.dumps({"by_name": {CANARY: "x"}}), model=spec)
    assert verdict == "fail" and CANARY not in reason and reason == "model:int_parsing@*/*"
    reply = json.dumps({"by_name": {}, "items": [{}, {CANARY: "x"}]})
    verdict, reason = run("pydantic_model", reply, model=spec)
    assert verdict == "fail" and reason == "model:int_parsing@*/1/*"


@pytest.mark.parametrize("spec", ["nomodule", "no.such.module:X", "json:loads", f"{__name__}:Missing"])
def test_bad_model_spec_fails_at_build(spec: str) -> None:
    """Malformed, unimportable or non-pydantic targets are rejected naming 'model'."""
    with pytest.raises(ParamError) as e:
        REG.build("pydantic_model", {"model": spec})
    assert e.value.key == "model"


@pytest.mark.parametrize("reply", ["NaN", "Infinity", "-Infinity", '{"a": NaN}', "[1, Infinity]"])
def test_non_finite_constants_are_not_json(reply: str) -> None:
    """Python's parser takes NaN and Infinity; RFC 8259 has no such values, and a strict
    consumer refuses them: valid_json and json_schema fail them as invalid_json."""
    ctx = CheckContext()
    assert REG.build("valid_json", {}).fn(reply, ctx) == CheckOutcome("fail", "invalid_json")
    schema = REG.build("json_schema", {"schema": {"type": ["object", "array", "number"]}})
    assert schema.fn(reply, ctx) == CheckOutcome("fail", "invalid_json")
    assert (
        REG.build("valid_json", {}).fn(reply.replace("NaN", "1").replace("Infinity", "2"), ctx).verdict
        == "pass"
    )
