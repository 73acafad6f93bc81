"""CSV sources: round trips, summing repeated keys, and errors that name file, line and column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from handoffmon.counts import CheckKey, Counts, TransitionKey
from handoffmon.errors import InputError
from handoffmon.sources.csv import (
    read_cells_csv,
    read_scores_csv,
    read_transitions_csv,
    write_cells_csv,
    write_transitions_csv,
)
from tests.refit.synth import plant, synth_counts


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_cells_csv_becomes_pass_and_fail_checks(tmp_path: Path) -> None:
    """n and passes become pass = passes, fail = n − passes; repeated keys add up; column order is free."""
    path = _write(
        tmp_path,
        "cells.csv",
        "model,rule,prefix_model,depth_bucket,n,passes,comment\n"
        "b,json,a,3-4,10,7,x\n"
        "b,json,a,3-4,5,5,y\n"
        "b,json,none,1,4,1,\n",
    )
    counts = read_cells_csv(path)
    assert counts.checks == {
        CheckKey("json", "b", "a", "3-4", "pass"): 12,
        CheckKey("json", "b", "a", "3-4", "fail"): 3,
        CheckKey("json", "b", "none", "1", "pass"): 1,
        CheckKey("json", "b", "none", "1", "fail"): 3,
    }


def test_transitions_csv(tmp_path: Path) -> None:
    """Each row is a TransitionKey with its count."""
    path = _write(
        tmp_path,
        "t.csv",
        "rule,model,handoff,from_verdict,to_verdict,count\njson,b,true,pass,fail,4\njson,b,false,fail,error,1\n",
    )
    assert read_transitions_csv(path).transitions == {
        TransitionKey("json", "b", "true", "pass", "fail"): 4,
        TransitionKey("json", "b", "false", "fail", "error"): 1,
    }


def test_write_then_read_round_trips_synthetic_counts(tmp_path: Path) -> None:
    """write_cells_csv / write_transitions_csv → read gives back the same pass/fail and transitions."""
    rng = np.random.default_rng(0)
    counts = synth_counts(plant(3, 2, rng), rng, n_pair=50, n_trans=10)
    write_cells_csv(counts, tmp_path / "c.csv")
    write_transitions_csv(counts, tmp_path / "t.csv")
    back = read_cells_csv(tmp_path / "c.csv").merge(read_transitions_csv(tmp_path / "t.csv"))
    assert {k: v for k, v in back.checks.items() if v} == {k: v for k, v in counts.checks.items() if v}
    assert back.transitions == {k: v for k, v in counts.transitions.items()}


def test_names_with_surrounding_spaces_round_trip(tmp_path: Path) -> None:
    """A model named " atlas " (and one named by spaces alone) is written and read back as the
    monitor counted it and the SQLite and Prometheus sources read it (it was read as "atlas",
    and "  " refused as an empty value); counts and verdicts are still read trimmed."""
    counts = Counts(
        checks={
            CheckKey(" r", " atlas ", "none", "1", "pass"): 3,
            CheckKey(" r", "b", " atlas ", "2", "fail"): 2,
            CheckKey(" r", "  ", "b", "2", "pass"): 1,
        },
        transitions={TransitionKey(" r", " atlas ", "false", "pass", "fail"): 4},
    )
    write_cells_csv(counts, tmp_path / "c.csv")
    write_transitions_csv(counts, tmp_path / "t.csv")
    back = read_cells_csv(tmp_path / "c.csv").merge(read_transitions_csv(tmp_path / "t.csv"))
    assert {k: v for k, v in back.checks.items() if v} == counts.checks
    assert back.transitions == counts.transitions
    padded = _write(tmp_path, "p.csv", "rule,prefix_model,model,depth_bucket,n,passes\nr,a,b, 2 , 3 , 1\n")
    assert read_cells_csv(padded).checks == {
        CheckKey("r", "b", "a", "2", "pass"): 1,
        CheckKey("r", "b", "a", "2", "fail"): 2,
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rule,prefix_model,model,depth_bucket,n\n", r"line 1: missing column\(s\) passes"),
        (
            "rule,prefix_model,model,depth_bucket,n,passes\nr,a,b,2,ten,1\n",
            r"line 2, column 'n': 'ten' is not an integer",
        ),
        (
            "rule,prefix_model,model,depth_bucket,n,passes\nr,a,b,2,3,1\nr,a,b,2,3,4\n",
            r"line 3, column 'passes': 4 passes exceed n = 3",
        ),
        ("rule,prefix_model,model,depth_bucket,n,passes\nr,a,b,deep,3,1\n", r"line 2, column 'depth_bucket'"),
        (
            "rule,prefix_model,model,depth_bucket,n,passes\nr,,b,2,3,1\n",
            r"line 2, column 'prefix_model': empty value",
        ),
        (
            "rule,prefix_model,model,depth_bucket,n,passes\nr,a,b,2,-3,1\n",
            r"line 2, column 'n': -3 is negative",
        ),
        (
            "rule,prefix_model,model,depth_bucket,n,passes\nr,a,b,2,3,1,extra\n",
            r"line 2: more fields than the header",
        ),
    ],
)
def test_bad_cells_files_name_file_line_and_column(tmp_path: Path, text: str, message: str) -> None:
    """Every malformed input raises InputError pointing at the exact place."""
    path = _write(tmp_path, "bad.csv", text)
    with pytest.raises(InputError, match=message) as info:
        read_cells_csv(path)
    assert str(path) in str(info.value)


def test_bad_transitions_values_are_named(tmp_path: Path) -> None:
    """Unknown handoff states and verdicts are rejected with the allowed values."""
    path = _write(
        tmp_path, "t.csv", "rule,model,handoff,from_verdict,to_verdict,count\nr,m,maybe,pass,fail,1\n"
    )
    with pytest.raises(
        InputError, match=r"line 2, column 'handoff': 'maybe' is not one of true, false, unknown"
    ):
        read_transitions_csv(path)


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    """A missing file is reported as such, not as a traceback."""
    with pytest.raises(InputError, match="cannot read"):
        read_cells_csv(tmp_path / "nope.csv")


def test_scores_csv_reads_rows_and_refuses_duplicates_and_nan(tmp_path: Path) -> None:
    """Scores are finite floats; a repeated (episode, prefix, suffix) names both lines."""
    ok = _write(tmp_path, "s.csv", "episode,prefix_model,suffix_model,score\ne1,a,b,0.5\ne1,b,b,1\n")
    assert read_scores_csv(ok) == [("e1", "a", "b", 0.5), ("e1", "b", "b", 1.0)]
    dup = _write(tmp_path, "d.csv", "episode,prefix_model,suffix_model,score\ne1,a,b,0.5\ne1,a,b,1\n")
    with pytest.raises(InputError, match=r"line 3, column 'episode'.*first on line 2"):
        read_scores_csv(dup)
    nan = _write(tmp_path, "n.csv", "episode,prefix_model,suffix_model,score\ne1,a,b,nan\n")
    with pytest.raises(InputError, match=r"line 2, column 'score': 'nan' is not a finite number"):
        read_scores_csv(nan)


def test_cells_csv_counts_equal_the_same_counts_refit(tmp_path: Path) -> None:
    """A refit from the CSV equals a refit from the Counts it was written from."""
    from handoffmon.depth import DepthBuckets
    from handoffmon.refit import refit

    rng = np.random.default_rng(1)
    counts = synth_counts(plant(3, 1, rng), rng, n_pair=80, n_trans=10)
    write_cells_csv(counts, tmp_path / "c.csv")
    write_transitions_csv(counts, tmp_path / "t.csv")
    back = read_cells_csv(tmp_path / "c.csv").merge(read_transitions_csv(tmp_path / "t.csv"))
    kw = {"buckets": DepthBuckets(), "now": 0.0, "source": "s"}
    assert (
        refit(back, **kw).to_json()
        == refit(Counts(checks=counts.checks, transitions=counts.transitions), **kw).to_json()
    )  # type: ignore[arg-type]


def test_switch_matrix_scores_round_trip_names_exactly(tmp_path: Path) -> None:
    """``scores_csv`` (eval switch-matrix --scores) and ``read_scores_csv`` (stats switch-matrix)
    keep author names exactly: surrounding spaces, a comma, a quote and a formula-looking name
    come back as written (they were written unquoted and read trimmed: " atlas " became "atlas",
    "gpt,4" split into two fields). A NaN score (no rule decided at the final turn) is left out
    as ``analyse`` leaves it out, so the file reads back instead of being refused."""
    from handoffmon.evals.switch import CellScore, scores_csv

    names = [" atlas ", 'gpt,4 "mini"', '=HYPERLINK("http://x")', "-1+2", "  "]
    cells = [
        CellScore(f"s#{e}", a, b, float((e + i + j) % 3) / 2, (a, b), 1)
        for e in range(3)
        for i, a in enumerate(names)
        for j, b in enumerate(names)
    ]
    cells.append(CellScore("t#0", names[0], names[1], float("nan"), (names[0], names[1]), 1))
    path = _write(tmp_path, "scores.csv", scores_csv(cells))
    back = read_scores_csv(path)
    assert back == [(c.episode, c.prefix_model, c.suffix_model, c.score) for c in cells[:-1]]
    assert {r[1] for r in back} == set(names)
