"""The refit's input check of shadow pairs (``refit.shadow_inputs``): cluster sums no conversations
can give are refused from an exact source (rule, pair and relation named) and, from an approximate
one, read as one conversation and reported, never silently narrower switch-cost intervals.

The counts are a shadowed simulated population counted as the live recorder counts
(``sim.shadow_arm.shadow_counts``, equal key for key to ``PairRecorder``:
``tests/shadow/test_recorder.py``), then damaged one stat at a time.
"""

from __future__ import annotations

import dataclasses
from functools import cache

import pytest

from handoffmon.config import RefitConfig
from handoffmon.counts import POOLED_RULE, Counts, ShadowKey
from handoffmon.depth import DepthBuckets
from handoffmon.errors import InputError
from handoffmon.refit import RefitResult, refit
from handoffmon.refit.inputs import CONVERSATIONS_DROPPED, ONE_CONVERSATION
from handoffmon.refit.result import SwitchCost
from handoffmon.sim.counting import counts_from_rows
from handoffmon.sim.shadow_arm import shadow_counts, simulate_shadowed
from tests.sim.test_shadow_arm import POP

BUCKETS = DepthBuckets()
SETTINGS = RefitConfig(min_n=5)


@cache
def shadowed_counts() -> Counts:
    """400 conversations of the shadow-arm population, 30% of deep turns shadowed."""
    rows, sh = simulate_shadowed(POP, 400, rate=0.3, seed=3)
    return dataclasses.replace(counts_from_rows(rows), shadow=shadow_counts(sh))


@cache
def _clean() -> RefitResult:
    return refit(shadowed_counts(), buckets=BUCKETS, settings=SETTINGS, now=0.0)


def _pair() -> tuple[str, str, str]:
    """(rule, A, B) of the per-rule shadow cell with the most pairs."""
    best = max(
        (s for s in _clean().rules["r1"].switch_costs), key=lambda s: (s.n_pairs, s.prefix_model, s.model)
    )
    return "r1", best.prefix_model, best.model


def damaged(counts: Counts, cell: tuple[str, str, str], **stats: int | None) -> Counts:
    """``counts`` with the shadow ``stats`` of ``cell`` set (None: the series removed)."""
    shadow = dict(counts.shadow)
    for stat, value in stats.items():
        key = ShadowKey(*cell, stat)
        assert key in shadow, key
        if value is None:
            del shadow[key]
        else:
            shadow[key] = value
    return dataclasses.replace(counts, shadow=shadow)


def _stat(cell: tuple[str, str, str], stat: str) -> int:
    return shadowed_counts().shadow[ShadowKey(*cell, stat)]


def _cost(result: RefitResult, cell: tuple[str, str, str]) -> SwitchCost:
    rule, a, b = cell
    return next(s for s in result.rules[rule].switch_costs if (s.prefix_model, s.model) == (a, b))


def test_real_shadow_sums_pass_the_exact_check_and_over_a_window() -> None:
    """Per-rule and pooled cells of a shadowed clustered population satisfy every relation: no
    refusal, no repair, and the exact check leaves the result unchanged."""
    exact = refit(shadowed_counts(), buckets=BUCKETS, settings=SETTINGS, now=0.0, exact=True)
    windowed = refit(shadowed_counts(), buckets=BUCKETS, settings=SETTINGS, now=0.0, window_s=3600.0)
    for result in (exact, windowed, _clean()):
        assert result.shadow_input_repaired_cells == 0 and result.shadow_input_repairs == ()
    assert len(exact.rules["all"].switch_costs) >= 6
    assert exact.to_json() == _clean().to_json()


@pytest.mark.parametrize(
    ("stats", "relation"),
    [
        ({"conversations": None}, "conversations >= 1"),  # a lost series read as independent pairs
        ({"b2": 0}, "model_only <= b2"),  # a reset series read as no discordance within conversations
        ({"n2": 0}, "pairs <= n2"),
        ({"bc": 10**6}, "b2 + 2bc + c2 <= bn + cn"),  # more cross terms than discordant pairs allow
        ({"conversations": 10**6}, "conversations <= pairs"),
    ],
)
def test_exact_source_refuses_naming_source_rule_pair_and_relation(
    stats: dict[str, int | None], relation: str
) -> None:
    rule, a, b = cell = _pair()
    with pytest.raises(InputError) as err:
        refit(
            damaged(shadowed_counts(), cell, **stats),
            buckets=BUCKETS,
            settings=SETTINGS,
            source="hm.db",
            exact=True,
        )
    message = str(err.value)
    assert message.startswith(f"hm.db: shadow pairs {rule} {a}->{b}: ") and relation in message
    assert f"pairs = {_cost(_clean(), cell).n_pairs}" in message


def test_exact_source_refuses_pooled_sums_lost_beside_per_rule_tables() -> None:
    """The pooled cell takes its table from the rules and its sums from rule ``all``: lost pooled
    sums read as independent pairs in the ``all`` fit."""
    _, a, b = _pair()
    counts = damaged(shadowed_counts(), (POOLED_RULE, a, b), conversations=None, n2=None)
    with pytest.raises(InputError, match=rf"shadow pairs all {a}->{b}: .*conversations >= 1"):
        refit(counts, buckets=BUCKETS, settings=SETTINGS, exact=True)


def test_exact_slack_is_a_hair() -> None:
    """G two over the pairs passes (1% + 2: workers sharing a store can race on a conversation's
    partial counts), one more beyond the 1% is refused."""
    cell = _pair()
    n = _cost(_clean(), cell).n_pairs
    slack = int(0.01 * n) + 2
    refit(
        damaged(shadowed_counts(), cell, conversations=n + slack),
        buckets=BUCKETS,
        settings=SETTINGS,
        exact=True,
    )
    with pytest.raises(InputError, match="conversations <= pairs"):
        over = damaged(shadowed_counts(), cell, conversations=n + slack + 1)
        refit(over, buckets=BUCKETS, settings=SETTINGS, exact=True)


def test_approximate_source_repairs_a_lost_series_widens_and_reports_it() -> None:
    """Prometheus lost the ``conversations`` series of one cell: the cell is read as one
    conversation (design effect N), its interval contains the intact one, and the result, its
    note and the count say so."""
    cell = _pair()
    result = refit(damaged(shadowed_counts(), cell, conversations=None), buckets=BUCKETS, settings=SETTINGS)
    assert result.shadow_input_repaired_cells == 1 and result.input_repaired_cells == 0
    (repair,) = result.shadow_input_repairs
    assert (repair.rule, repair.prefix_model, repair.model, repair.action) == (*cell, ONE_CONVERSATION)
    assert repair.conversations == 0 and "conversations >= 1" in repair.violated
    assert repair.pairs == _cost(_clean(), cell).n_pairs and repair.n2 == _stat(cell, "n2")
    full, read = _cost(_clean(), cell), _cost(result, cell)
    assert read.design_effect == repair.pairs > full.design_effect
    assert read.ci_low < full.ci_low and read.ci_high > full.ci_high
    assert "1 shadow pair cell(s) had conversation-cluster sums" in result.note

    # the other cells' intervals are untouched (their BH-adjusted p-values share the family)
    def intervals(r: RefitResult) -> list[tuple[float, ...]]:
        rest = [s for s in r.rules["r1"].switch_costs if (s.prefix_model, s.model) != cell[1:]]
        return [(s.design_effect, s.ci_low, s.ci_high) for s in rest]

    assert intervals(result) == intervals(_clean()) and len(intervals(result)) >= 2


def test_only_too_many_conversations_drops_g_instead() -> None:
    cell = _pair()
    result = refit(damaged(shadowed_counts(), cell, conversations=10**6), buckets=BUCKETS, settings=SETTINGS)
    (repair,) = result.shadow_input_repairs
    assert repair.violated == ("conversations <= pairs",) and repair.action == CONVERSATIONS_DROPPED
    full, read = _cost(_clean(), cell), _cost(result, cell)
    assert read.design_effect >= full.design_effect  # N²/Σn² conversations: at most G


def test_window_tolerates_what_increments_do_and_repairs_the_rest() -> None:
    """Over a window G = 0 beside Σn² > 0 is a cell of conversations begun before it (no
    repair); an n2 series reset on its own (far below the pairs) is repaired."""
    cell = _pair()
    lost_g = damaged(shadowed_counts(), cell, conversations=None)
    result = refit(lost_g, buckets=BUCKETS, settings=SETTINGS, window_s=3600.0)
    assert result.shadow_input_repaired_cells == 0
    reset = damaged(shadowed_counts(), cell, n2=2)
    result = refit(reset, buckets=BUCKETS, settings=SETTINGS, window_s=3600.0)
    assert [(r.rule, r.prefix_model, r.model) for r in result.shadow_input_repairs] == [cell]
    assert "pairs <= n2" in result.shadow_input_repairs[0].violated


def test_over_a_window_cells_under_min_n_are_not_checked() -> None:
    """No switch cost is estimated below ``min_n`` pairs, so none can be too narrow; there a
    window's young series and unseen counter resets read healthy small cells as broken (a real
    Prometheus read 8 pairs with Σbn + Σcn = 11 beside Σn² = 0). Counter totals still are."""
    cell = _pair()
    n = _cost(_clean(), cell).n_pairs
    reset = damaged(shadowed_counts(), cell, n2=2)
    for min_n, repaired in ((n, 1), (n + 1, 0)):
        result = refit(reset, buckets=BUCKETS, settings=RefitConfig(min_n=min_n), window_s=3600.0)
        assert result.shadow_input_repaired_cells == repaired, min_n
    assert refit(reset, buckets=BUCKETS, settings=RefitConfig(min_n=n + 1)).shadow_input_repaired_cells == 1


def test_small_slips_of_an_approximate_read_are_tolerated() -> None:
    """A scrape between a pair's increments of two series: within 5% + 2, no repair."""
    cell = _pair()
    slip = damaged(shadowed_counts(), cell, b2=_stat(cell, "b2") - 2, bn=_stat(cell, "bn") + 3)
    assert refit(slip, buckets=BUCKETS, settings=SETTINGS).shadow_input_repaired_cells == 0


def test_repairs_round_trip_through_the_document() -> None:
    result = refit(damaged(shadowed_counts(), _pair(), b2=0), buckets=BUCKETS, settings=SETTINGS, now=0.0)
    again = RefitResult.from_json(result.to_json())
    assert (
        again.shadow_input_repairs == result.shadow_input_repairs and again.shadow_input_repaired_cells == 1
    )
    old = result.to_dict()
    del old["shadow_input_repairs"], old["shadow_input_repaired_cells"]  # a document of the last release
    assert RefitResult.from_dict(old).shadow_input_repairs == ()


def test_tables_without_any_cluster_sums_are_refused_from_a_file_and_read_unclustered_otherwise() -> None:
    """Counts that keep no shadow sums at all (hand-built, as in ``test_switch_costs``) read as
    independent pairs, unchanged; an exact source kept them (the recorder counts both), so there
    the sums were cut."""
    from handoffmon.counts import SHADOW_CLUSTER

    tables = {k: v for k, v in shadowed_counts().shadow.items() if k.stat not in SHADOW_CLUSTER}
    counts = dataclasses.replace(shadowed_counts(), shadow=tables)
    result = refit(counts, buckets=BUCKETS, settings=SETTINGS)
    assert result.shadow_input_repaired_cells == 0 and result.rules["all"].switch_costs
    assert {s.design_effect for s in result.rules["all"].switch_costs} == {1.0}
    with pytest.raises(InputError, match="shadow pair tables but no conversation-cluster sums"):
        refit(counts, buckets=BUCKETS, settings=SETTINGS, source="hm.db", exact=True)
