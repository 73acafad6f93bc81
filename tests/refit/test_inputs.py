"""The refit's input check (``refit.inputs``): cluster sums that no conversations can give are
refused from an exact source (cell and relation named) and, from an approximate one, read as one
conversation and reported, never silently narrower.

The counts are the turn-level reference aggregation (``sim.counting``: the SQL of the turn-log
source, equal key for key to a live ``Monitor``'s, ``tests/sim/test_live_clustered.py``) of a
clustered production-like population, then damaged one stat at a time.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pytest

from handoffmon.config import RefitConfig
from handoffmon.counts import CELL_TOTAL, CellStatKey, Counts
from handoffmon.depth import DepthBuckets
from handoffmon.errors import InputError
from handoffmon.refit import RefitResult, refit
from handoffmon.refit.inputs import CONVERSATIONS_DROPPED, ONE_CONVERSATION
from handoffmon.sim.calibration import standard_population
from handoffmon.sim.counting import counts_from_rows
from handoffmon.sim.population import simulate

BUCKETS = DepthBuckets()
SETTINGS = RefitConfig(min_n=5)


@cache
def _counts() -> Counts:
    rows = simulate(replace(standard_population(rules=2), not_applicable_rate=0.0), 200, seed=11)
    return counts_from_rows(rows, BUCKETS)


@cache
def _clean() -> RefitResult:
    return refit(_counts(), buckets=BUCKETS, settings=SETTINGS, now=0.0)


def _cell() -> tuple[str, str, str]:
    """The largest reported handoff pair of rule_0: (rule, prefix, model)."""
    pairs = [p for p in _clean().rules["rule_0"].pairs if p.observed]
    best = max(pairs, key=lambda p: p.n)
    return "rule_0", best.prefix_model, best.model


def _damaged(**stats: int | None) -> Counts:
    """The counts with the whole-cell ``stats`` of ``_cell()`` set (None: the series removed)."""
    rule, prefix, model = _cell()
    cell_stats = dict(_counts().cell_stats)
    for stat, value in stats.items():
        key = CellStatKey(rule, model, prefix, CELL_TOTAL, stat)
        assert key in cell_stats
        if value is None:
            del cell_stats[key]
        else:
            cell_stats[key] = value
    return replace(_counts(), cell_stats=cell_stats)


def _stat(stat: str) -> int:
    rule, prefix, model = _cell()
    return _counts().cell_stats[CellStatKey(rule, model, prefix, CELL_TOTAL, stat)]


def test_real_cluster_sums_pass_the_exact_check_and_over_a_window() -> None:
    """The reference aggregation of a clustered population (ping-pong, canary, two rules pooled)
    satisfies every relation exactly: no refusal, no repair, the same result as before."""
    exact = refit(_counts(), buckets=BUCKETS, settings=SETTINGS, now=0.0, exact=True)
    windowed = refit(_counts(), buckets=BUCKETS, settings=SETTINGS, now=0.0, window_s=3600.0)
    for result in (exact, windowed, _clean()):
        assert result.input_repaired_cells == 0 and result.input_repairs == ()
    assert exact.to_json() == _clean().to_json()


@pytest.mark.parametrize(
    ("stats", "relation"),
    [
        ({"n2": None}, "yn <= n2"),  # the n2 series lost
        ({"conversations": None}, "conversations >= 1"),  # reads as unclustered
        ({"y2": -1}, "y2 >= 0"),
        ({"yn": 0}, "y2 <= yn"),
        ({"conversations": 10**6}, "conversations <= checks"),
        ({"conversations": 2}, "checks^2 <= conversations*n2"),
    ],
)
def test_exact_source_refuses_naming_source_cell_and_relation(
    stats: dict[str, int | None], relation: str
) -> None:
    rule, prefix, model = _cell()
    with pytest.raises(InputError) as err:
        refit(_damaged(**stats), buckets=BUCKETS, settings=SETTINGS, source="sqlite://hm.db", exact=True)
    message = str(err.value)
    assert message.startswith(f"sqlite://hm.db: cell {rule} {prefix}->{model}: ")
    assert relation in message and "conversations = " in message


def test_exact_source_refuses_a_stat_counted_more_than_its_checks_allow() -> None:
    """Σn² above N² (one conversation holding every check is the most) is a damaged file."""
    n2 = _stat("n2")
    with pytest.raises(InputError, match=r"n2 <= checks\^2"):
        refit(_damaged(n2=n2 * 10**4), buckets=BUCKETS, settings=SETTINGS, exact=True)


def _pair(result: RefitResult) -> tuple[float, float, float]:
    rule, prefix, model = _cell()
    p = result.rules[rule].pair(prefix, model)
    assert p is not None and p.observed
    return p.ci_low, p.ci_high, p.design_effect


def test_approximate_source_repairs_a_lost_series_and_reports_it() -> None:
    """Prometheus without the n2 series of one cell: the cell reads as one conversation (design
    effect N), its interval is wider than the undamaged clustered one and than independent
    turns', and the repair is in the JSON, its note and round trip."""
    rule, prefix, model = _cell()
    got = refit(_damaged(n2=None), buckets=BUCKETS, settings=SETTINGS, source="prometheus://p", now=0.0)
    assert got.input_repaired_cells == 1
    (repair,) = got.input_repairs
    assert (repair.rule, repair.prefix_model, repair.model) == (rule, prefix, model)
    assert repair.action == ONE_CONVERSATION and "checks <= n2" in repair.violated and repair.n2 == 0
    lo, hi, deff = _pair(got)
    lo0, hi0, deff0 = _pair(_clean())
    unclustered = refit(replace(_counts(), cell_stats={}), buckets=BUCKETS, settings=SETTINGS, now=0.0)
    lo1, hi1, _ = _pair(unclustered)
    assert deff == repair.checks > deff0 >= 1.0
    assert lo <= lo0 and hi >= hi0 and lo <= lo1 and hi >= hi1
    assert hi - lo > 1.5 * (hi0 - lo0)
    assert "1 cell(s) had conversation-cluster sums" in got.note
    assert RefitResult.from_json(got.to_json()).input_repairs == got.input_repairs


def test_a_lost_conversations_series_is_no_longer_read_as_independent_turns() -> None:
    """Without the G series (n2, y2, yn kept) a raw-total read had design effect 1 for the cell;
    now it is repaired to one conversation and reported."""
    got = refit(_damaged(conversations=None), buckets=BUCKETS, settings=SETTINGS, now=0.0)
    assert got.input_repaired_cells == 1 and got.input_repairs[0].action == ONE_CONVERSATION
    assert "conversations >= 1" in got.input_repairs[0].violated
    assert _pair(got)[2] == got.input_repairs[0].checks


def test_window_tolerates_what_increments_do_and_repairs_the_rest() -> None:
    """Over a window G = 0 beside Σn² > 0 and Σn² > N² are what straddling conversations give:
    no repair (the G = 0 rule of docs/concepts/statistics.md applies). Σn² below the checks is
    not: repaired. G above the checks is expected over a window too (``increase`` drops the
    first sample of each sparse checks series born in it, tests/sources/test_prometheus_window.py);
    in counter totals it is repaired: G dropped, the cell counts as N²/Σn² conversations."""
    assert (
        refit(
            _damaged(conversations=10**6), buckets=BUCKETS, settings=SETTINGS, window_s=600.0
        ).input_repaired_cells
        == 0
    )
    straddling = _damaged(conversations=None, n2=_stat("n2") * 50)
    assert refit(straddling, buckets=BUCKETS, settings=SETTINGS, window_s=600.0).input_repaired_cells == 0
    lost = refit(_damaged(n2=3), buckets=BUCKETS, settings=SETTINGS, window_s=600.0)
    assert lost.input_repaired_cells == 1 and lost.input_repairs[0].action == ONE_CONVERSATION
    many = refit(_damaged(conversations=10**6), buckets=BUCKETS, settings=SETTINGS)
    assert [r.action for r in many.input_repairs] == [CONVERSATIONS_DROPPED]
    assert many.input_repairs[0].violated == ("conversations <= checks",)
    assert _pair(many)[2] >= _pair(_clean())[2]


def test_small_slips_of_an_approximate_read_are_tolerated() -> None:
    """A scrape between a turn's increments, or ``increase`` extrapolating two series apart,
    moves a stat by a few percent: not a repair."""
    slipped = _damaged(yn=int(_stat("n2") * 1.03) + 3)
    assert refit(slipped, buckets=BUCKETS, settings=SETTINGS).input_repaired_cells == 0
    with pytest.raises(InputError, match="yn <= n2"):
        refit(slipped, buckets=BUCKETS, settings=SETTINGS, exact=True)
    # an exact source keeps a hair of slack: two workers racing on a one-conversation cell's
    # counts leave its Σn² 2 short of N²
    rule, prefix, model = _cell()
    cell = _clean().rules[rule].pair(prefix, model)
    assert cell is not None
    n = cell.n
    y = round(
        sum(
            v
            for k, v in _counts().checks.items()
            if (k.rule, k.prefix_model, k.model, k.verdict) == (rule, prefix, model, "pass")
        )
    )
    raced = _damaged(conversations=1, y2=y * y, yn=y * n, n2=n * n - 2)
    assert refit(raced, buckets=BUCKETS, settings=SETTINGS, exact=True).input_repaired_cells == 0


def test_a_cell_with_checks_and_no_sums_beside_clustered_cells_is_repaired() -> None:
    """Every stat of one cell missing (an old replica's cell in a mixed fleet): exact refuses,
    approximate reads it as one conversation (a row of sums is added for it)."""
    damaged = _damaged(conversations=None, y2=None, yn=None, n2=None)
    with pytest.raises(InputError, match="conversations >= 1"):
        refit(damaged, buckets=BUCKETS, settings=SETTINGS, exact=True)
    got = refit(damaged, buckets=BUCKETS, settings=SETTINGS, now=0.0)
    assert got.input_repaired_cells == 1
    assert _pair(got)[2] == got.input_repairs[0].checks


def test_pooled_sums_are_checked_too() -> None:
    """The pooled ``all`` sums (a turn's checks of every rule as one cluster member) against the
    checks of every rule."""
    _, prefix, model = _cell()
    cell_stats = dict(_counts().cell_stats)
    del cell_stats[CellStatKey("all", model, prefix, CELL_TOTAL, "n2")]
    with pytest.raises(InputError, match=f"cell all {prefix}->{model}"):
        refit(replace(_counts(), cell_stats=cell_stats), buckets=BUCKETS, settings=SETTINGS, exact=True)


def test_clean_baseline_without_any_cluster_sums_is_refused_from_a_file() -> None:
    with pytest.raises(InputError, match="no conversation-cluster sums"):
        refit(replace(_counts(), cell_stats={}), buckets=BUCKETS, settings=SETTINGS, exact=True)


@pytest.mark.parametrize("label", ["abc", "0", "-3", "2-"])
def test_a_depth_bucket_that_is_no_label_is_an_error(label: str) -> None:
    """A checked turn's bucket 'abc' was dropped from every cell and '0' read as depth 1,
    silently; now the refit names the label."""
    checks = dict(_counts().checks)
    key = next(iter(checks))
    checks[key._replace(depth_bucket=label)] = checks.pop(key)
    with pytest.raises(InputError, match=f"depth bucket '{label}' of checked turns"):
        refit(replace(_counts(), checks=checks), buckets=BUCKETS, settings=SETTINGS)


def test_sparse_cell_totals_equal_the_dense_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """Large cell spaces (K = 200 × 100 rules) total the cells via a sort instead of bins: the
    same repairs and the same intervals, cells without any sums row included."""
    import handoffmon.refit.inputs as inputs

    damaged = _damaged(conversations=None, y2=None, yn=None, n2=None)
    dense = refit(damaged, buckets=BUCKETS, settings=SETTINGS, now=0.0)
    monkeypatch.setattr(inputs, "_DENSE_CELLS_MAX", 0)
    sparse = refit(damaged, buckets=BUCKETS, settings=SETTINGS, now=0.0)
    assert sparse.input_repairs == dense.input_repairs and dense.input_repaired_cells == 1
    assert sparse.to_json() == dense.to_json()
