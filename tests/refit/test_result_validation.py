"""Refit and switch-matrix JSON read by hand-edited or damaged documents: an ``InputError`` naming
the file and the key, never an AttributeError/TypeError/ValueError from deep inside a reader.

The documents are real ones: the simulator's K = 8 refit pinned in tests/refit/golden (what
``refit(...)`` writes for ``sim_k8_clean``) and a 3-model switch matrix of random scores.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from handoffmon.errors import HandoffmonError, InputError
from handoffmon.refit.result import RefitResult, SwitchMatrixResult
from handoffmon.refit.switch_matrix import ScoreTable, switch_matrix
from tests.evals.test_doc_validation import Edit, _drop, _set
from tests.refit.golden_cases import load


def _refit_doc() -> dict[str, Any]:
    return copy.deepcopy(load("sim_k8_clean"))


def _matrix_doc() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    rows = [
        (f"e{i}", f"m{a}", f"m{b}", float(rng.random()))
        for i in range(30)
        for a in range(3)
        for b in range(3)
    ]
    return switch_matrix(ScoreTable.from_rows(rows), resamples=200, seed=1, min_n=5).to_dict()


REFIT_CASES: list[tuple[str, Edit, str, str]] = [
    ("version 0", _set(("version",), 0), "version", "version 0"),
    ("version true", _set(("version",), True), "version", "version true"),
    ("version as a string", _set(("version",), "2"), "version", "version '2'"),
    ("rules a list", _set(("rules",), []), "rules", "expected an object, got a list"),
    ("a fit a string", _set(("rules", "all"), "x"), "rules.all", "expected an object, got a string"),
    ("a model a list", _set(("rules", "all", "models", "m0"), [1]),
     "rules.all.models.m0", "expected an object"),
    ("pairs an object", _set(("rules", "r0", "pairs"), {}),
     "rules.r0.pairs", "expected a list, got an object"),
    ("a delta a string", _set(("rules", "all", "pairs", 0, "delta"), "high"), "rules.all.pairs[0].delta",
     "expected a number, null, 'inf' or '-inf', got a string 'high'"),
    ("a delta a boolean", _set(("rules", "all", "pairs", 0, "delta"), True), "rules.all.pairs[0].delta",
     "got a boolean true"),
    ("a model name a number", _set(("rules", "all", "pairs", 1, "prefix_model"), 3),
     "rules.all.pairs[1].prefix_model", "expected a string, got a number 3"),
    ("n a boolean", _set(("rules", "all", "pairs", 0, "n"), True),
     "rules.all.pairs[0].n", "expected an integer"),
    ("n a fraction", _set(("rules", "all", "pairs", 0, "n"), 2.5),
     "rules.all.pairs[0].n", "expected an integer"),
    ("significant a string", _set(("rules", "all", "pairs", 0, "significant"), "yes"),
     "rules.all.pairs[0].significant", "expected true or false"),
    ("an interval of one bound", _set(("rules", "all", "markov", "m0", "p_tf_ci"), [0.1]),
     "rules.all.markov.m0.p_tf_ci", "expected a list of 2 values, got 1"),
    ("mu missing", _drop(("rules", "all", "mu")), "rules.all.mu", "missing"),
    ("buckets a string", _set(("buckets",), "1,2"), "buckets", "expected a list, got a string"),
    ("a bucket label that is none", _set(("buckets", 1), "two"), "buckets[1]", "not a depth bucket label"),
    ("buckets out of order", _set(("buckets",), ["1", "3-4", "2", "5-8", "9-16", "17-32", "33+"]), "buckets",
     "not contiguous"),
    ("buckets not from 1", _set(("buckets",), ["2", "3+"]), "buckets", "edges must start at 1"),
    ("a curve bucket of another setting", _set(("rules", "all", "curves", "m0", "buckets", 2), "3-5"),
     "rules.all.curves.m0.buckets[2]", "not one of the refit's buckets"),
    ("a curve one value short", _set(("rules", "all", "curves", "m0", "adherence"), [0.5]),
     "rules.all.curves.m0.adherence", "1 value(s), but buckets has 7"),
    ("a negative count", _set(("rules", "all", "curves", "m0", "n", 0), -5), "rules.all.curves.m0.n[0]",
     "expected a count ≥ 0"),
    ("a cell adherence of 7", _set(("rules", "all", "cells", 0, "adherence", 0), 7),
     "rules.all.cells[0].adherence[0]",
     "expected a share in [0, 1]"),
    ("cells a list of strings", _set(("rules", "all", "cells"), ["x"]),
     "rules.all.cells[0]", "expected an object"),
    ("a pair's negative count", _set(("rules", "r0", "pairs", 1, "n"), -1), "rules.r0.pairs[1].n",
     "expected a count ≥ 0, got -1"),
    ("created_at in milliseconds", _set(("created_at",), 1.8e12), "created_at", "expected a UNIX time"),
    ("created_at negative", _set(("created_at",), -1e20), "created_at", "expected a UNIX time"),
    ("created_at null (NaN)", _set(("created_at",), None), "created_at", "expected a UNIX time"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("edit", "key", "message"), [c[1:] for c in REFIT_CASES], ids=[c[0] for c in REFIT_CASES]
)
def test_a_damaged_refit_document_names_file_and_key(edit: Edit, key: str, message: str) -> None:
    """Each edit used to be read (version 0/true, wrong lengths) or to raise AttributeError,
    TypeError or a 'malformed' message naming no key; now "<file>: <key>: <what>"."""
    doc = _refit_doc()
    edit(doc)
    with pytest.raises(InputError) as info:
        RefitResult.from_json(json.dumps(doc), source="refit.json")
    assert str(info.value).startswith(f"refit.json: {key}: "), str(info.value)
    assert message in str(info.value)


MATRIX_CASES: list[tuple[str, Edit, str, str]] = [
    ("version 0", _set(("version",), 0), "version", "version 0"),
    ("pairs an object", _set(("pairs",), {}), "pairs", "expected a list, got an object"),
    ("mu a string", _set(("mu",), "x"), "mu", "expected a number"),
    ("a model's n a fraction", _set(("models", "m0", "n"), 1.5), "models.m0.n", "expected an integer"),
    ("a cell a number", _set(("cells", 0), 3), "cells[0]", "expected an object, got a number 3"),
    ("authors a list", _set(("authors",), ["m0"]), "authors", "expected an object, got a list"),
    ("rule missing", _drop(("rule",)), "rule", "missing"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("edit", "key", "message"), [c[1:] for c in MATRIX_CASES], ids=[c[0] for c in MATRIX_CASES]
)
def test_a_damaged_switch_matrix_document_names_file_and_key(edit: Edit, key: str, message: str) -> None:
    """The fit's keys sit at the document's top level, and the error names them there (not ``fit.mu``)."""
    doc = _matrix_doc()
    edit(doc)
    with pytest.raises(InputError) as info:
        SwitchMatrixResult.from_dict(doc, source="matrix.json")
    assert str(info.value).startswith(f"matrix.json: {key}: "), str(info.value)
    assert message in str(info.value)


def test_documents_that_are_not_objects_and_deep_nesting_are_input_errors() -> None:
    for reader in (RefitResult.from_dict, SwitchMatrixResult.from_dict):
        with pytest.raises(InputError, match=r"f\.json: not a handoffmon"):
            reader([1, 2], source="f.json")  # type: ignore[operator,arg-type]
    with pytest.raises(InputError, match=r"f\.json: .*nested too deeply"):
        RefitResult.from_json("[" * 100_000 + "]" * 100_000, source="f.json")


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    children = (
        node.items() if isinstance(node, dict) else enumerate(node[:2]) if isinstance(node, list) else ()
    )
    for key, child in children:
        yield from _paths(child, (*prefix, key))


VALUES: list[Any] = [[], {}, "x", "inf", 1.5, -3, 0, 7, None, True, [1, 2], {"a": 1}, 10**30]


def _fuzz(doc: dict[str, Any], read: Callable[[dict[str, Any]], object], runs: int, seed: int) -> int:
    """Set a random key of ``doc`` to a random value (or delete it) ``runs`` times and read the
    result with ``read``: a HandoffmonError or success only. Returns how many were refused."""
    rng = random.Random(seed)
    paths = [p for p in _paths(doc) if p]
    refused = 0
    for _ in range(runs):
        path, damaged = rng.choice(paths), copy.deepcopy(doc)
        node = damaged
        for key in path[:-1]:
            node = node[key]
        if isinstance(node, dict) and rng.random() < 0.2:
            del node[path[-1]]
        else:
            node[path[-1]] = copy.deepcopy(rng.choice(VALUES))
        try:
            read(damaged)
        except HandoffmonError:
            refused += 1
    return refused


@pytest.mark.slow
def test_fuzzed_refit_documents_fail_cleanly_in_every_reader() -> None:
    """120 random edits of a real refit document read as ``handoffmon report`` and
    ``shapes export --source refit.json`` read it (decode, render the page, rebuild the shapes).
    Before: AttributeError, TypeError and, from per-bucket lists of another length, ValueError
    out of zip() in the report and out of tuple.index in the shapes."""
    from handoffmon.evals.shapes import shapes_from_refit
    from handoffmon.report import render_report

    def read(doc: dict[str, Any]) -> None:
        result = RefitResult.from_dict(doc, source="refit.json")
        render_report(result)
        shapes_from_refit(result, source="refit.json")

    assert _fuzz(_refit_doc(), read, runs=120, seed=3) > 60


def test_fuzzed_switch_matrix_documents_fail_cleanly() -> None:
    """400 random edits of a real switch matrix read as ``eval compare`` reads one."""
    from handoffmon.evals.compare import matrix_pairs, read_switch_matrix

    def read(doc: dict[str, Any]) -> None:
        matrix_pairs([read_switch_matrix(doc, "matrix.json")])

    assert _fuzz(_matrix_doc(), read, runs=400, seed=4) > 200
