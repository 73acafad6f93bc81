"""Refit JSON: versioned schema, NaN/inf encoding, strict reading."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from handoffmon.errors import InputError
from handoffmon.refit.result import (
    OBSERVATIONAL_NOTE,
    MarkovFit,
    ModelScores,
    PairEffect,
    RefitResult,
    RuleFit,
)


def _result() -> RefitResult:
    nan = float("nan")
    pair = PairEffect("r", "a", "b", 0, nan, nan, nan, nan, False, 0.01, 0.02, False)
    markov = MarkovFit("b", "r", 0.0, (0.0, 0.1), 0.0, (0.0, 0.2), nan, (nan, nan), math.inf, 0.3, 0.1, 40)
    fit = RuleFit(
        "r", -0.01, 0.005, 0.7, 0.6, 3, {"a": ModelScores(0.1, 0.01, -0.1, 0.02, 300)}, [pair], {"b": markov}
    )
    return RefitResult(1.5, "local", True, OBSERVATIONAL_NOTE, {"r": fit, "all": fit}, buckets=("1", "2+"))


def test_nan_becomes_null_and_inf_a_string_and_both_round_trip() -> None:
    """Strict JSON (no NaN tokens); reading restores NaN and inf."""
    text = _result().to_json()
    doc = json.loads(text)
    assert doc["rules"]["r"]["pairs"][0]["delta"] is None
    assert doc["rules"]["r"]["markov"]["b"]["half_life_turns"] == "inf"
    back = RefitResult.from_json(text)
    assert math.isnan(back.rules["r"].pairs[0].delta)
    assert back.rules["r"].markov["b"].half_life_turns == math.inf
    assert back.rules["r"].markov["b"].p_tf_ci == (0.0, 0.1)
    assert back.to_json() == text


def test_newer_versions_and_other_documents_are_refused() -> None:
    """A reader refuses versions it does not know and documents of another schema."""
    doc = _result().to_dict()
    with pytest.raises(InputError, match="version 3"):
        RefitResult.from_dict({**doc, "version": 3}, source="x.json")
    with pytest.raises(InputError, match=r"not a handoffmon\.refit"):
        RefitResult.from_dict({"schema": "other"})
    with pytest.raises(InputError, match="line 1"):
        RefitResult.from_json("{not json", source="bad.json")


def test_residuals_and_pair_lookup() -> None:
    """residuals skips pairs without a residual; pair() finds an ordered pair."""
    fit = _result().rules["r"]
    assert fit.residuals == {}
    assert fit.pair("a", "b") is not None and fit.pair("b", "a") is None


def test_pair_table_builds_its_records_once_on_first_read() -> None:
    """PairTable defers building the records, builds them once, and equals the list it wraps."""
    from handoffmon.refit.result import PairEffect, PairTable

    calls = []
    rows = [PairEffect("r", "a", "b", 40, 0.1, 0.02, 0.06, 0.14, True, 0.09, 0.01, True)]

    def build() -> list[PairEffect]:
        calls.append(1)
        return list(rows)

    table = PairTable(build, 1)
    assert len(table) == 1 and not calls
    assert table == rows and list(table) == rows and table[0] is table[0]
    assert calls == [1]


def test_json_text_reads_back_as_the_dict_in_both_layouts() -> None:
    """orjson writes the document: compact and indented text parse to exactly ``to_dict``
    (same key order too), non-ASCII names stay readable UTF-8, other indents are refused."""
    base = _result()
    result = dataclasses.replace(base, source="zürich-東京", rules={"règle": base.rules["r"]})
    doc = result.to_dict()
    for indent in (None, 2):
        text = result.to_json(indent=indent)
        back = json.loads(text)
        assert back == doc
        assert list(back["rules"]["règle"]) == list(doc["rules"]["règle"])
        assert "zürich-東京" in text
    assert "\n  " in result.to_json() and "\n" not in result.to_json(indent=None)
    with pytest.raises(ValueError, match="indent"):
        result.to_json(indent=4)
