"""Feedback loop: shapes from simulated production; compare flags a planted fast decay and only that."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from handoffmon.cli import main
from handoffmon.counts import CheckKey, Counts, TransitionKey, TurnKey
from handoffmon.depth import DepthBuckets
from handoffmon.errors import InputError
from handoffmon.evals.compare import adjusted_one_sided_test, compare, holm
from handoffmon.evals.results import build_result
from handoffmon.evals.script import script_from_dict
from handoffmon.evals.shapes import Shapes, export_shapes, shapes_from_counts
from handoffmon.evals.store import Row
from handoffmon.evals.switch import CellScore, analyse
from handoffmon.types import NO_PREFIX

BUCKETS = DepthBuckets()
CLEAN = (0.95, 0.04, 0.30)  # depth-1 adherence, p_TF, p_FT: the eval's (too clean) chain
PRODUCTION = {"fast_decay": (0.95, 0.25, 0.20), "matched": CLEAN}  # planted production chains per rule
CHECKPOINTS = (1, 4, 10, 20)


def _step(rng: np.random.Generator, prev: bool | None, chain: tuple[float, float, float]) -> bool:
    base, p_tf, p_ft = chain
    p = base if prev is None else (1 - p_tf) if prev else p_ft
    return bool(rng.random() < p)


def simulate_production(n_conversations: int = 4000, seed: int = 1) -> tuple[Counts, list[int]]:
    """Conversations on models m1/m2 (20% handoffs per turn, some to m3), per-rule planted chains."""
    rng = np.random.default_rng(seed)
    checks: Counter[CheckKey] = Counter()
    trans: Counter[TransitionKey] = Counter()
    turns: Counter[TurnKey] = Counter()
    lengths = []
    for _ in range(n_conversations):
        length = int(min(40, rng.geometric(1 / 9)))
        lengths.append(length)
        author, prefix = ("m1" if rng.random() < 0.5 else "m2"), NO_PREFIX
        state: dict[str, bool] = {}
        for depth in range(1, length + 1):
            bucket = BUCKETS.bucket(depth)
            handoff = "false" if prefix in (NO_PREFIX, author) else "true"
            turns[TurnKey(author, prefix, bucket, handoff)] += 1
            for rule, chain in PRODUCTION.items():
                ok = _step(rng, state.get(rule), chain)
                verdict = "pass" if ok else "fail"
                checks[CheckKey(rule, author, prefix, bucket, verdict)] += 1
                if rule in state:
                    trans[
                        TransitionKey(rule, author, handoff, "pass" if state[rule] else "fail", verdict)
                    ] += 1
                state[rule] = ok
            prefix = author
            if rng.random() < 0.2:
                author = {"m1": "m2", "m2": "m1", "m3": "m1"}[author] if rng.random() < 0.8 else "m3"
    counts = Counts(
        checks=dict(checks),
        transitions=dict(trans),
        turns=dict(turns),
        session_lengths=dict(Counter(lengths)),
    )
    return counts, lengths


def eval_rows(runs: int = 150, seed: int = 2) -> tuple[list[Row], object]:
    """Eval rows from the clean chain for both rules at the checkpoints (depth 1..20)."""
    script = script_from_dict(
        {
            "id": "clean",
            "rules": [{"name": r, "check": "no_commas"} for r in PRODUCTION],
            "turns": [{"user": f"t{d}", "checkpoint": d in CHECKPOINTS} for d in range(1, 21)],
        }
    )
    rng = np.random.default_rng(seed)
    rows = []
    for run in range(runs):
        state: dict[str, bool] = {}
        for depth in range(1, 21):
            for rule in PRODUCTION:
                ok = _step(rng, state.get(rule), CLEAN)
                state[rule] = ok
                rows.append(
                    Row(
                        "clean",
                        "m1",
                        run,
                        depth,
                        rule,
                        "pass" if ok else "fail",
                        "",
                        None,
                        depth in CHECKPOINTS,
                        False,
                        "m1",
                        10 * depth,
                    )
                )
    return rows, script


@pytest.fixture(scope="module")
def production() -> tuple[Shapes, list[int], Counts]:
    counts, lengths = simulate_production()
    return shapes_from_counts(counts, source="simulated"), lengths, counts


def test_compare_flags_the_fast_decaying_rule_at_depth_and_not_the_matched_one(production: tuple) -> None:
    """Planted production p_TF 0.25 vs eval 0.04: flagged at the deep checkpoints; the matched rule never."""
    shapes = production[0]
    rows, script = eval_rows()
    result = build_result(rows, [script], "mem")
    c = compare(shapes, [result])
    flagged = {(r.rule, r.depth) for r in c.flagged}
    assert {r for r, _ in flagged} == {"fast_decay"}
    assert {("fast_decay", 4), ("fast_decay", 10), ("fast_decay", 20)} <= flagged
    assert ("fast_decay", 1) not in flagged  # same depth-1 adherence: no difference at the start
    matched = [r for r in c.rules if r.rule == "matched"]
    assert {r.depth for r in matched} == set(CHECKPOINTS) and not any(r.flagged for r in matched)
    assert {r.model for r in c.rules} == {"m1"}  # joined on the author: m1's production only
    deep = next(r for r in c.rules if (r.rule, r.depth) == ("fast_decay", 20))
    assert deep.depth_bucket == "17-24" and deep.eval_n == 150 and deep.depth_matched
    assert deep.production_adherence < 0.6 < deep.eval_adherence


def test_adjusted_one_sided_test_matches_the_agresti_caffo_formula() -> None:
    """z = (p̃2 − p̃1 − shift)/sqrt(deff·p̃1(1−p̃1)/(n1+2) + p̃2(1−p̃2)/(n2+2)), p = 1 − Φ(z)."""
    from scipy.stats import norm

    z, p = adjusted_one_sided_test(40, 100, 60, 100, shift=0.01, deff=2.0)
    p1, p2 = 41 / 102, 61 / 102
    expected = (p2 - p1 - 0.01) / np.sqrt(2 * p1 * (1 - p1) / 102 + p2 * (1 - p2) / 102)
    assert z == pytest.approx(expected) and p == pytest.approx(norm.sf(expected))
    assert np.isnan(adjusted_one_sided_test(0, 0, 3, 4)[1])


def test_holm_adjustment_matches_the_step_down_definition() -> None:
    """Holm: sorted p × (m − rank), running maximum, capped at 1; NaN entries are skipped."""
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    out = holm([0.5, float("nan"), 0.4])
    assert out[0] == pytest.approx(0.8) and np.isnan(out[1]) and out[2] == pytest.approx(0.8)
    assert holm([0.9, 0.8]) == [1.0, 1.0]


def test_session_length_percentiles_and_suggested_checkpoints(production: tuple) -> None:
    """Exact histogram percentiles equal numpy's inverted-CDF percentiles; they become the suggestions."""
    shapes, lengths, counts = production
    s = shapes.session_lengths
    assert s["method"] == "histogram" and s["conversations"] == len(lengths)
    for q in (50, 75, 90, 95, 99):
        assert s[f"p{q}"] == int(np.percentile(lengths, q, method="inverted_cdf"))
    c = compare(shapes, [build_result(*((lambda r, sc: (r, [sc]))(*eval_rows(runs=5))), "mem")])
    assert c.suggested_checkpoints == tuple(sorted({s["p50"], s["p75"], s["p90"], s["p95"]}))
    assert c.eval_max_depth == 20
    no_hist = shapes_from_counts(
        Counts(checks=counts.checks, transitions=counts.transitions, turns=counts.turns), source="x"
    )
    approx = no_hist.session_lengths
    assert approx["method"] == "turns_by_depth" and approx["conversations"] == len(lengths)
    for q in (50, 75, 90, 95):  # survival interpolated in buckets: within max(1 depth, 7 %), as
        # tests/evals/test_shapes_session_lengths.py derives (a bucket early was accepted before)
        assert abs(approx[f"p{q}"] - s[f"p{q}"]) <= max(1, 0.07 * s[f"p{q}"]), (q, approx, s)
    # lengths are capped at 40: 2 % of the conversations end exactly there, a step inside 33-48 that
    # a survival interpolated through the bucket smooths out; p99 = 40 is still read in its bucket
    assert s["p99"] == 40 and BUCKETS.bucket(approx["p99"]) == BUCKETS.bucket(40), approx


def test_handoff_pairs_missing_from_the_matrix_are_listed(production: tuple) -> None:
    """Production pairs m1↔m2, →m3 and m3→m1; a matrix over m1, m2 leaves the m3 pairs missing."""
    shapes = production[0]
    pairs = {(p["prefix_model"], p["model"]) for p in shapes.handoff_pairs}
    assert pairs == {("m1", "m2"), ("m2", "m1"), ("m1", "m3"), ("m2", "m3"), ("m3", "m1")}
    assert sum(p["share"] for p in shapes.handoff_pairs) == pytest.approx(1.0)
    cells = [
        CellScore(f"e{i}", a, b, float((i + len(a + b)) % 2), ())
        for i in range(6)
        for a in ("m1", "m2")
        for b in ("m1", "m2")
    ]
    matrix = analyse(cells, resamples=200)
    c = compare(shapes, [], [matrix], min_share=0.0)
    assert {(p["prefix_model"], p["model"]) for p in c.missing_pairs} == pairs - {("m1", "m2"), ("m2", "m1")}


def test_shapes_json_round_trip_and_markov_parameters(production: tuple) -> None:
    """The versioned document round-trips; pooled Markov parameters recover the planted production chain."""
    shapes = production[0]
    back = Shapes.from_json(shapes.to_json())
    assert back.to_json() == shapes.to_json()
    fast = back.shape("fast_decay")
    assert fast is not None and fast.markov["p_tf"] == pytest.approx(0.25, abs=0.02)
    assert back.shape("matched").markov["stationary"] == pytest.approx(0.30 / 0.34, abs=0.02)  # type: ignore[union-attr]
    with pytest.raises(InputError, match=r"not a handoffmon\.shapes document"):
        Shapes.from_json(json.dumps({"schema": "other"}))


def test_cli_shapes_export_from_refit_json_and_compare_exit_status(tmp_path: Path, production: tuple) -> None:
    """refit.json → shapes export → eval compare: exit 3 and the flagged rule printed."""
    from handoffmon.refit import refit

    counts = production[2]
    (tmp_path / "refit.json").write_text(refit(counts, buckets=BUCKETS).to_json())
    out = CliRunner().invoke(
        main,
        [
            "shapes",
            "export",
            "--source",
            str(tmp_path / "refit.json"),
            "--out",
            str(tmp_path / "shapes.json"),
        ],
    )
    assert out.exit_code == 0, out.output
    shapes = export_shapes(str(tmp_path / "refit.json"))
    # the refit used the configured BUCKETS (empty deep buckets included), so count with the same buckets
    same_buckets = shapes_from_counts(counts, source="simulated", buckets=BUCKETS)
    assert shapes.shape("fast_decay").n == same_buckets.shape("fast_decay").n  # type: ignore[union-attr]
    rows, script = eval_rows()
    (tmp_path / "eval.json").write_text(build_result(rows, [script], "mem").to_json())
    res = CliRunner().invoke(
        main,
        [
            "eval",
            "compare",
            "--shapes",
            str(tmp_path / "shapes.json"),
            str(tmp_path / "eval.json"),
            "--out",
            str(tmp_path / "cmp.json"),
        ],
    )
    assert res.exit_code == 3, res.output
    assert (
        "TOO CLEAN fast_decay · m1 @ depth 20 (17-24)" in res.output and "TOO CLEAN matched" not in res.output
    )
    doc = json.loads((tmp_path / "cmp.json").read_text())
    assert doc["schema"] == "handoffmon.eval_compare" and doc["missing_pairs"]


def test_shapes_from_cells_csv_derive_pairs_and_sessions_from_checks(
    tmp_path: Path, production: tuple
) -> None:
    """A cells CSV has no turn counters: per-cell turns are the largest rule's checks, so pairs match."""
    from handoffmon.sources.csv import write_cells_csv

    counts = production[2]
    write_cells_csv(counts, tmp_path / "cells.csv")
    shapes = export_shapes(str(tmp_path / "cells.csv"))
    from_turns = {(p["prefix_model"], p["model"]): p["turns"] for p in production[0].handoff_pairs}
    assert {(p["prefix_model"], p["model"]): p["turns"] for p in shapes.handoff_pairs} == from_turns
    assert shapes.session_lengths["method"] == "turns_by_depth"
    assert shapes.shape("fast_decay").n == production[0].shape("fast_decay").n  # type: ignore[union-attr]


def test_shapes_of_cells_that_count_nothing_is_no_data_not_a_crash(tmp_path: Path) -> None:
    """A cells CSV whose rows all count 0 checks (a fresh deployment's export) holds no handoff
    and no checked turn: NoDataError naming the file (exit 4), not a ZeroDivisionError while
    sharing out the handoff pairs' zero turns, nor shapes of zeros written as a success."""
    from handoffmon.counts import CheckKey, Counts
    from handoffmon.errors import NoDataError
    from handoffmon.sources.csv import write_cells_csv

    zero = {CheckKey("r", "b", "a", "2", v): 0 for v in ("pass", "fail")}
    write_cells_csv(Counts(checks=zero), tmp_path / "cells.csv")
    with pytest.raises(NoDataError, match=r"cells\.csv: no checked turns"):
        export_shapes(str(tmp_path / "cells.csv"))


def test_shapes_from_prometheus_api(tmp_path: Path) -> None:
    """prometheus:// goes through the Prometheus source; missing history-token data is noted, not fatal."""
    from tests.sources.fakeprom import fake_prometheus

    with fake_prometheus() as (url, seen):
        shapes = export_shapes(url)
    json_rule = shapes.shape("json")
    assert json_rule is not None and json_rule.n[shapes.buckets.index("3-4")] == 10
    assert [(p["prefix_model"], p["model"], p["turns"]) for p in shapes.handoff_pairs] == [("a", "b", 10)]
    assert "unavailable" in shapes.history_tokens
    assert any("histogram_quantile" in q.get("query", "") for q in seen)


def test_a_production_model_named_like_the_pooled_entry_is_refused(tmp_path: Path) -> None:
    """A model labelled '*' (the shapes' pooled-over-models name) used to be added into the pooled
    entry: its 5 checks counted twice (n = 15 for 10 checks) and the model itself vanished, exit 0."""
    cells = tmp_path / "cells.csv"
    cells.write_text(
        "rule,model,prefix_model,depth_bucket,n,passes\nr,*,none,1,5,3\nr,m,none,1,5,3\nr,m,*,2,5,3\n",
        encoding="utf-8",
    )
    with pytest.raises(InputError, match=r"cells\.csv: model '\*' .*reserved"):
        export_shapes(str(cells))
    res = CliRunner().invoke(
        main, ["shapes", "export", "--source", str(cells), "--out", str(tmp_path / "s.json")]
    )
    assert res.exit_code == 1 and f"error: {cells}: model '*'" in res.output, res.output
    assert not (tmp_path / "s.json").exists()


def test_a_refit_with_a_model_named_like_the_pooled_entry_is_refused(
    tmp_path: Path, production: tuple
) -> None:
    """Through a refit.json: its '*' curve and the pooled '*' entry would be two shapes of one key."""
    from handoffmon.refit import refit

    text = refit(production[2], buckets=BUCKETS).to_json()
    assert '"m1"' in text
    (tmp_path / "refit.json").write_text(text.replace('"m1"', '"*"'), encoding="utf-8")
    with pytest.raises(InputError, match=r"refit\.json: model '\*' .*reserved"):
        export_shapes(str(tmp_path / "refit.json"))


def test_counts_in_depth_buckets_that_overlap_are_refused_not_dropped(tmp_path: Path) -> None:
    """Series from two depth.buckets settings (9-12 and 9-16: a config change inside the window, or
    two deployments summed) used to lose the 9-16 checks silently (n 50, not 110, exit 0)."""
    cells = tmp_path / "cells.csv"
    rows = ["1,100,90", "2,80,70", "3-4,120,100", "5-8,100,80", "9-12,50,40", "9-16,60,30"]
    cells.write_text(
        "rule,model,prefix_model,depth_bucket,n,passes\n"
        + "".join(f"r,m,{'none' if r.startswith('1,') else 'm'},{r}\n" for r in rows),
        encoding="utf-8",
    )
    with pytest.raises(InputError, match=r"cells\.csv: depth bucket\(s\) 9-16 .*not one of the buckets"):
        export_shapes(str(cells))
    res = CliRunner().invoke(
        main, ["shapes", "export", "--source", str(cells), "--out", str(tmp_path / "s.json")]
    )
    assert res.exit_code == 1 and "9-16" in res.output and not (tmp_path / "s.json").exists(), res.output
    counts = Counts(checks={CheckKey("r", "m", NO_PREFIX, "9-16", "pass"): 5})
    with pytest.raises(InputError, match=r"x: depth bucket\(s\) 9-16 .*1, 2, 3-4"):
        shapes_from_counts(counts, source="x", buckets=DepthBuckets())  # explicit buckets: the same check
