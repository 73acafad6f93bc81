"""refit_series: every refit gauge says who fitted it, and the input repairs are a gauge."""

from __future__ import annotations

import dataclasses

import pytest

from handoffmon.exporters.refit_series import FIT_LABEL, LOCAL, POOLED, REFIT_GAUGES, refit_series
from handoffmon.labels import LabelGuard
from tests.exporters.refits import make_refit

REPAIRED = "handoffmon_refit_input_repaired_cells"


def test_every_gauge_ends_with_the_fit_label() -> None:
    """The alert rules select the standing fit by `fit`: every refit gauge carries it, last."""
    assert all(spec.labels[-1] == FIT_LABEL for spec in REFIT_GAUGES)
    assert REPAIRED in {spec.name for spec in REFIT_GAUGES}


@pytest.mark.parametrize("fit", [LOCAL, POOLED])
def test_every_series_carries_the_fit_it_was_published_as(fit: str) -> None:
    """A process's own refit publishes fit="local", a refit job fit="pooled", on every series."""
    series = refit_series(make_refit(), LabelGuard(), fit)
    keys = [key for values in series.values() for key in values]
    assert len(keys) > 20
    assert {key[-1] for key in keys} == {fit}
    spec_len = {spec.name: len(spec.labels) for spec in REFIT_GAUGES}
    assert all(len(key) == spec_len[name] for name, values in series.items() for key in values)


def test_the_default_is_a_local_fit() -> None:
    """The exporters' in-process publish (no fit given) is the replica's local fit."""
    series = refit_series(make_refit(), LabelGuard())
    assert series["handoffmon_refit_last_success_timestamp_seconds"] == {(LOCAL,): 1_800_000_100.0}


def test_input_repairs_are_exported_as_a_count_also_when_zero() -> None:
    """The repaired-cell count is published with every refit (0 too: an alert tells "none" from
    "no refit")."""
    clean = refit_series(make_refit(), LabelGuard(), POOLED)
    assert clean[REPAIRED] == {(POOLED,): 0.0}
    damaged = dataclasses.replace(make_refit(), input_repaired_cells=7)
    assert refit_series(damaged, LabelGuard(), POOLED)[REPAIRED] == {(POOLED,): 7.0}


def test_an_unknown_fit_is_refused() -> None:
    """Only the two documented values: a third would split the rules' standing-fit join."""
    with pytest.raises(ValueError, match="fit must be one of"):
        refit_series(make_refit(), LabelGuard(), "replica-7")
