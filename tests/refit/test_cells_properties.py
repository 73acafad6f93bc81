"""Property: Counts → arrays keeps every pass/fail count and drops everything else."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from handoffmon.counts import CheckKey, Counts, TransitionKey
from handoffmon.depth import DepthBuckets
from handoffmon.refit.cells import build_cells

_models = st.sampled_from(["a", "b", "c", "none", "unknown"])
_check = st.builds(
    CheckKey,
    st.sampled_from(["r1", "r2"]),
    _models,
    _models,
    st.sampled_from(["1", "2", "3-4", "4", "33+", "40+"]),
    st.sampled_from(["pass", "fail", "not_applicable", "error"]),
)
_trans = st.builds(
    TransitionKey,
    st.sampled_from(["r1", "r2"]),
    _models,
    st.sampled_from(["true", "false", "unknown", "weird"]),
    st.sampled_from(["pass", "fail", "error"]),
    st.sampled_from(["pass", "fail", "not_applicable"]),
)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(_check, st.integers(0, 1000), max_size=40),
    st.dictionaries(_trans, st.integers(0, 1000), max_size=20),
)
def test_totals_are_preserved_per_verdict(checks: dict, transitions: dict) -> None:  # type: ignore[type-arg]
    """Sum of passes (fails) = sum of pass (fail) counts whose suffix is a real model; same
    for pass/fail transitions; unexpected handoff labels count as unknown."""
    cells = build_cells(Counts(checks=checks, transitions=transitions), DepthBuckets())
    real = lambda m: m not in ("none", "unknown")  # noqa: E731
    want_pass = sum(v for k, v in checks.items() if k.verdict == "pass" and real(k.model))
    want_fail = sum(v for k, v in checks.items() if k.verdict == "fail" and real(k.model))
    assert int(cells.checks.passes.sum()) == want_pass and int(cells.checks.fails.sum()) == want_fail
    pf = ("pass", "fail")
    want_t = sum(
        v for k, v in transitions.items() if k.from_verdict in pf and k.to_verdict in pf and real(k.model)
    )
    assert int(cells.transitions.sum()) == want_t
    weird = sum(
        v
        for k, v in transitions.items()
        if k.handoff in ("unknown", "weird") and k.from_verdict in pf and k.to_verdict in pf and real(k.model)
    )
    assert int(cells.transitions[:, :, 2].sum()) == weird
