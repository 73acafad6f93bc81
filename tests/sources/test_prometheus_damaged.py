"""The Prometheus source against partial and hostile answers, through ``handoffmon refit``.

A loopback fake of the query API answers with the series a real handoffmon fleet exports for
a clustered population (its counters summed by the query's labels), then with series lost,
reset or forged. Partial cluster sums are repaired and reported (a cell read as one
conversation, never silently as independent turns); values no counter can hold, forged label
sets and empty answers are errors.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from handoffmon.cli import main
from handoffmon.counts import CELL_TOTAL, SHADOW_TABLE, Counts
from handoffmon.depth import DepthBuckets
from handoffmon.sim.calibration import standard_population
from handoffmon.sim.counting import counts_from_rows
from handoffmon.sim.shadow_arm import shadow_counts, simulate_shadowed
from handoffmon.sources.prometheus import MAX_LABEL_VALUE_CHARS
from tests.sources.fakeprom import QuietHandler, as_window, loopback_server, reply

Series = list[tuple[dict[str, str], str]]


@cache
def _counts() -> Counts:
    """120 clustered conversations, half their deep turns shadowed (the served rows are
    ``simulate``'s whatever the shadow rate)."""
    pop = replace(standard_population(rules=1), not_applicable_rate=0.0)
    rows, pairs = simulate_shadowed(pop, 120, rate=0.5, seed=21)
    return replace(counts_from_rows(rows, DepthBuckets()), shadow=shadow_counts(pairs))


def fleet_series(counts: Counts) -> dict[str, Series]:
    """What ``sum by (<key labels>)`` of a handoffmon fleet's counters answers, per metric."""
    out: dict[str, Series] = {}

    def add(metric: str, labels: dict[str, str], value: int) -> None:
        out.setdefault(metric, []).append((labels, str(value)))

    for k, v in counts.checks.items():
        add("handoffmon_checks_total", k._asdict(), v)
    for tk, v in counts.transitions.items():
        add("handoffmon_rule_transitions_total", tk._asdict(), v)
    turns: dict[tuple[str, str, str], int] = {}
    for t, v in counts.turns.items():
        turns[(t.model, t.prefix_model, t.depth_bucket)] = (
            turns.get((t.model, t.prefix_model, t.depth_bucket), 0) + v
        )
    for (m, p, b), v in turns.items():
        add("handoffmon_turns_total", {"model": m, "prefix_model": p, "depth_bucket": b}, v)
    for k, v in counts.baseline_checks.items():
        labels = {"rule": k.rule, "model": k.model, "depth_bucket": k.depth_bucket, "verdict": k.verdict}
        add("handoffmon_baseline_checks_total", labels, v)
    for sk, v in counts.cell_stats.items():
        add("handoffmon_cell_stats_total", sk._asdict(), v)
    for pk, v in counts.shadow.items():
        add("handoffmon_shadow_pair_stats_total", pk._asdict(), v)
    return out


@contextmanager
def serving(series: dict[str, Series], extra: dict[str, Any] | None = None) -> Iterator[str]:
    """A fake Prometheus answering every query with ``series`` of the metric it names (and the
    top-level keys ``extra`` to the cell-stats query, e.g. a partial answer's warnings)."""

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            params = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
            metric = re.search(r"handoffmon_[a-z_]+_total", params.get("query", ""))
            found = series.get(metric.group(0), []) if metric else []
            result = [{"metric": m, "value": [1700000000.0, v]} for m, v in found]
            body: dict[str, Any] = {"status": "success", "data": {"resultType": "vector", "result": result}}
            if metric and metric.group(0) == "handoffmon_cell_stats_total":
                body.update(extra or {})
            reply(self, 200, json.dumps(as_window(body, params.get("query", ""))).encode())

    with loopback_server(Handler) as port:
        yield f"prometheus://127.0.0.1:{port}"


def _refit(
    series: dict[str, Series], *extra: str, body: dict[str, Any] | None = None
) -> tuple[int, str, str]:
    with serving(series, body) as url:
        res = CliRunner().invoke(main, ["refit", "--source", url, "--out", "-", "--min-n", "5", *extra])
    return res.exit_code, res.stdout, res.stderr


def _biggest_handoff_cell() -> tuple[str, str, str]:
    """(rule, prefix, model) of the handoff cell with the most checks."""
    n: dict[tuple[str, str, str], int] = {}
    for k, v in _counts().checks.items():
        if k.prefix_model not in (k.model, "none", "unknown"):
            n[(k.rule, k.prefix_model, k.model)] = n.get((k.rule, k.prefix_model, k.model), 0) + v
    return max(n, key=lambda c: n[c])


def _without(series: dict[str, Series], stat: str, cell: tuple[str, str, str]) -> dict[str, Series]:
    rule, prefix, model = cell
    want = {"rule": rule, "model": model, "prefix_model": prefix, "depth_bucket": CELL_TOTAL, "stat": stat}
    kept = [(m, v) for m, v in series["handoffmon_cell_stats_total"] if m != want]
    assert len(kept) == len(series["handoffmon_cell_stats_total"]) - 1
    return {**series, "handoffmon_cell_stats_total": kept}


def _pair(doc: dict[str, Any], cell: tuple[str, str, str]) -> dict[str, Any]:
    rule, prefix, model = cell
    return next(p for p in doc["rules"][rule]["pairs"] if (p["prefix_model"], p["model"]) == (prefix, model))


def test_a_full_answer_refits_like_the_counts_with_nothing_repaired() -> None:
    code, out, err = _refit(fleet_series(_counts()))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["clustered"] and doc["input_repaired_cells"] == 0 and "warning" not in err
    assert doc["shadow_input_repaired_cells"] == 0 and doc["rules"]["all"]["switch_costs"]


def test_a_lost_stat_series_is_repaired_reported_and_widens_the_interval() -> None:
    """The n2 series of one cell dropped (relabeling, a sample limit): the refit says so on
    stderr and in the JSON, and the cell's interval is wider than with its full sums (before,
    Σn² = 0 gave it a design effect of about 1: independent turns)."""
    cell = _biggest_handoff_cell()
    code, out, _ = _refit(fleet_series(_counts()))
    full = _pair(json.loads(out), cell)
    code, out, err = _refit(_without(fleet_series(_counts()), "n2", cell))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["input_repaired_cells"] == 1 and "warning: 1 cell(s) had cluster sums" in err
    (repair,) = doc["input_repairs"]
    assert (repair["rule"], repair["prefix_model"], repair["model"]) == cell
    assert repair["action"] == "one_conversation" and "checks <= n2" in repair["violated"]
    damaged = _pair(doc, cell)
    assert damaged["ci_low"] <= full["ci_low"] and damaged["ci_high"] >= full["ci_high"]
    assert damaged["design_effect"] == repair["checks"] > full["design_effect"]


def test_over_a_window_a_missing_conversations_series_is_tolerated_and_a_reset_n2_is_not() -> None:
    """--window: G = 0 beside Σn² > 0 is a cell of conversations that began before the window
    (no repair); an n2 series reset on its own (its increase far below the checks) is repaired."""
    cell = _biggest_handoff_cell()
    code, out, err = _refit(_without(fleet_series(_counts()), "conversations", cell), "--window", "1h")
    assert code == 0 and json.loads(out)["input_repaired_cells"] == 0, err
    series = fleet_series(_counts())
    rule, prefix, model = cell
    reset = [
        (
            m,
            "2"
            if (m["stat"], m["rule"], m["prefix_model"], m["model"]) == ("n2", rule, prefix, model)
            else v,
        )
        for m, v in series["handoffmon_cell_stats_total"]
    ]
    code, out, err = _refit({**series, "handoffmon_cell_stats_total": reset}, "--window", "1h")
    assert code == 0, err
    assert [r["model"] for r in json.loads(out)["input_repairs"]] == [model]


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf", "-3"])
def test_a_value_no_counter_holds_is_an_error(value: str) -> None:
    """NaN, ±Inf or a negative sum (a gauge or a rule writing under the name): exit 1 naming the
    metric; a negative value was dropped silently before."""
    series = fleet_series(_counts())
    labels, _ = series["handoffmon_checks_total"][0]
    series["handoffmon_checks_total"][0] = (labels, value)
    code, out, err = _refit(series)
    assert code == 1 and out == ""
    assert "handoffmon_checks_total has value" in err and "not a count >= 0" in err


def test_forged_label_sets_are_errors() -> None:
    """Two series with the same key labels (the second overwrote the first), a key label
    missing (relabeling dropped it: the cell named ''), an over-long label value."""
    base = fleet_series(_counts())
    first_labels, first_value = base["handoffmon_checks_total"][0]
    cases = {
        "the same labels": [*base["handoffmon_checks_total"], (dict(first_labels), first_value)],
        "has no 'prefix_model' label": [
            ({k: v for k, v in first_labels.items() if k != "prefix_model"}, first_value),
            *base["handoffmon_checks_total"][1:],
        ],
        "an over-long 'model' label": [
            ({**first_labels, "model": "m" * (MAX_LABEL_VALUE_CHARS + 1)}, first_value),
            *base["handoffmon_checks_total"][1:],
        ],
    }
    for message, checks in cases.items():
        code, out, err = _refit({**base, "handoffmon_checks_total": checks})
        assert code == 1 and out == "", message
        assert message in err and len(err) < 2000, err


def test_baseline_without_any_cluster_sums_is_an_error() -> None:
    """``handoffmon_cell_stats_total`` without its cluster stats (only ``depth`` kept by a
    relabeling): every interval would have read turns as independent."""
    series = fleet_series(_counts())
    series["handoffmon_cell_stats_total"] = [
        (m, v) for m, v in series["handoffmon_cell_stats_total"] if m["stat"] == "depth"
    ]
    code, _, err = _refit(series)
    assert code == 1 and "has no cluster sums" in err


def test_an_empty_answer_is_no_data_not_a_refit_of_nothing() -> None:
    code, out, err = _refit({})
    assert code == 4 and out == "" and "no checks to refit" in err


def test_every_conversations_series_lost_is_still_a_clustered_read_and_reported() -> None:
    """No ``stat="conversations"`` series at all (y2, yn, n2 kept), counter totals: the answer
    had read as ``clustered: false``; now every cell is repaired and the JSON says clustered."""
    series = fleet_series(_counts())
    series["handoffmon_cell_stats_total"] = [
        (m, v) for m, v in series["handoffmon_cell_stats_total"] if m["stat"] != "conversations"
    ]
    code, out, err = _refit(series)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["clustered"] is True and doc["input_repaired_cells"] > 10
    assert all("conversations >= 1" in r["violated"] for r in doc["input_repairs"])


@pytest.mark.parametrize("extra", [(), ("--config", "CONFIG")])
def test_a_series_with_no_depth_bucket_label_is_an_error(extra: tuple[str, ...], tmp_path: Path) -> None:
    """depth_bucket="abc": without --config the buckets inferred from the labels stopped on a
    bare int() error, with it the series were dropped from every cell."""
    config = tmp_path / "handoffmon.yaml"
    config.write_text("rules: []\n")
    series = fleet_series(_counts())
    labels, value = series["handoffmon_checks_total"][0]
    series["handoffmon_checks_total"][0] = ({**labels, "depth_bucket": "abc"}, value)
    code, out, err = _refit(series, *(str(config) if a == "CONFIG" else a for a in extra))
    assert code == 1 and out == "" and "depth bucket 'abc'" in err


def test_a_partial_answer_is_an_error() -> None:
    """Thanos, Mimir and Cortex answer a query some stores missed with success and warnings: a
    partial sum (its cells' stats would not add up), refused naming the metric; so is a vector
    answer without its result list (it read as no series)."""
    warned = {"warnings": ["partial response: store 10.0.0.7:10901 unavailable"]}
    code, out, err = _refit(fleet_series(_counts()), body=warned)
    assert code == 1 and out == ""
    assert "handoffmon_cell_stats_total with warnings" in err and "store 10.0.0.7:10901" in err
    code, out, err = _refit(fleet_series(_counts()), body={"data": {"resultType": "vector"}})
    assert code == 1 and "malformed Prometheus result for handoffmon_cell_stats_total" in err


def _biggest_shadow_cell() -> tuple[str, str, str]:
    """(rule, A, B) of the per-rule shadow cell with the most pairs."""
    n: dict[tuple[str, str, str], int] = {}
    for k, v in _counts().shadow.items():
        if k.stat in SHADOW_TABLE and k.rule != "all":
            n[(k.rule, k.prefix_model, k.model)] = n.get((k.rule, k.prefix_model, k.model), 0) + v
    return max(n, key=lambda c: (n[c], c))


def _shadow_set(
    series: dict[str, Series], cell: tuple[str, str, str], stat: str, value: str | None
) -> dict[str, Series]:
    """``series`` with one shadow stat series of ``cell`` set to ``value`` (None: lost)."""
    want = dict(zip(("rule", "prefix_model", "model", "stat"), (*cell, stat), strict=True))
    old = series["handoffmon_shadow_pair_stats_total"]
    kept = [(m, v) for m, v in old if m != want]
    assert len(kept) == len(old) - 1
    if value is not None:
        kept.append((want, value))
    return {**series, "handoffmon_shadow_pair_stats_total": kept}


def _cost(doc: dict[str, Any], cell: tuple[str, str, str]) -> dict[str, Any]:
    rule, a, b = cell
    return next(s for s in doc["rules"][rule]["switch_costs"] if (s["prefix_model"], s["model"]) == (a, b))


def test_a_lost_shadow_series_is_repaired_reported_and_widens_the_switch_cost() -> None:
    """The ``conversations`` series of one shadow cell dropped: the refit says so on stderr and in
    the JSON, and the switch cost's interval holds the one of the full answer (before, G = 0 gave
    it a design effect of 1: independent pairs)."""
    cell = _biggest_shadow_cell()
    code, out, _ = _refit(fleet_series(_counts()))
    full = _cost(json.loads(out), cell)
    code, out, err = _refit(_shadow_set(fleet_series(_counts()), cell, "conversations", None))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["shadow_input_repaired_cells"] == 1 and doc["input_repaired_cells"] == 0
    assert "warning: 1 shadow pair cell(s) had cluster sums" in err
    (repair,) = doc["shadow_input_repairs"]
    assert (repair["rule"], repair["prefix_model"], repair["model"]) == cell
    assert repair["action"] == "one_conversation" and "conversations >= 1" in repair["violated"]
    damaged = _cost(doc, cell)
    assert damaged["design_effect"] == repair["pairs"] > full["design_effect"]
    assert damaged["ci_low"] < full["ci_low"] and damaged["ci_high"] > full["ci_high"]


def test_over_a_window_a_lost_shadow_conversations_series_is_tolerated_and_a_reset_n2_is_not() -> None:
    cell = _biggest_shadow_cell()
    code, out, err = _refit(
        _shadow_set(fleet_series(_counts()), cell, "conversations", None), "--window", "1h"
    )
    assert code == 0 and json.loads(out)["shadow_input_repaired_cells"] == 0, err
    code, out, err = _refit(_shadow_set(fleet_series(_counts()), cell, "n2", "2"), "--window", "1h")
    assert code == 0, err
    repairs = json.loads(out)["shadow_input_repairs"]
    assert [(r["rule"], r["prefix_model"], r["model"]) for r in repairs] == [cell]
    assert "pairs <= n2" in repairs[0]["violated"]


def test_shadow_tables_without_any_cluster_sums_are_an_error() -> None:
    """Every shadow cluster series dropped (a relabeling keeping the tables): each switch cost
    would have read its pairs as independent."""
    series = fleet_series(_counts())
    series["handoffmon_shadow_pair_stats_total"] = [
        (m, v) for m, v in series["handoffmon_shadow_pair_stats_total"] if m["stat"] in SHADOW_TABLE
    ]
    code, out, err = _refit(series)
    assert code == 1 and out == "" and "has paired tables but no cluster sums" in err
