"""The refit JSON on simulated inputs matches the pinned documents to 1e-9 (speed-ups keep the numbers)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.refit.golden_cases import CASES, load, run

TOL = 1e-9


def _diff(want: Any, got: Any, path: str, out: list[str]) -> None:
    if isinstance(want, dict) and isinstance(got, dict):
        if want.keys() != got.keys():
            out.append(f"{path}: keys {sorted(want.keys() ^ got.keys())}")
        for key in want.keys() & got.keys():
            _diff(want[key], got[key], f"{path}.{key}", out)
    elif isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            out.append(f"{path}: length {len(want)} != {len(got)}")
        for i, (w, g) in enumerate(zip(want, got, strict=False)):
            _diff(w, g, f"{path}[{i}]", out)
    elif isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        if not math.isclose(want, got, rel_tol=TOL, abs_tol=TOL):
            out.append(f"{path}: {want!r} != {got!r}")
    elif want != got or type(want) is not type(got):
        out.append(f"{path}: {want!r} != {got!r}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_refit_json_matches_pinned_document(name: str) -> None:
    """Every number of the refit document (Δ, intervals, p-values, π/σ, risk, Markov, curves,
    cells) equals the pinned one within 1e-9 absolute or relative; names, flags and counts exactly."""
    got = run(name).to_dict()
    out: list[str] = []
    _diff(load(name), got, "$", out)
    assert not out, f"{len(out)} differences, first: {out[:5]}"


def test_diff_catches_a_moved_number() -> None:
    """The comparison itself fails on a change just above the tolerance."""
    out: list[str] = []
    _diff({"a": [1.0, None]}, {"a": [1.0 + 1e-6, None]}, "$", out)
    _diff({"b": None}, {"b": 0.0}, "$", out)
    assert len(out) == 2
