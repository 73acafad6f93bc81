"""The benchmark runner: a broken benchmark does not stop the run; table and JSON carry every row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmarks import runner
from tests.benchmarks.suites import SUITES, Row


def _ok(quick: bool) -> list[Row]:
    return [
        Row("fake", "wrapped call", 12.345, 99.0, "µs", 1.5, "wrapped ÷ direct p50", note="n=10"),
        Row("fake", "detail only in JSON", 1.0, None, "µs", headline=False),
    ]


def _broken(quick: bool) -> list[Row]:
    raise RuntimeError("bench exploded")


@pytest.fixture
def fake_suites(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "SUITES", {"broken": _broken, "fake": _ok})


def test_every_real_benchmark_is_registered() -> None:
    """The runner covers every bench_*.py module next to it, and every suite runs one of them
    (named after it, or after it and a variant: ``proxy_llm`` runs ``bench_proxy``)."""
    here = Path(__file__).parent
    modules = {p.stem.removeprefix("bench_") for p in here.glob("bench_*.py")}
    assert modules <= set(SUITES)
    assert {name.split("_")[0] for name in SUITES} == modules


def test_a_failing_benchmark_becomes_an_error_row_and_the_rest_still_run(
    fake_suites: None, tmp_path: Path
) -> None:
    """main(): exit 1, an error row for the broken suite, the other suite's rows, JSON and markdown."""
    md = tmp_path / "table.md"
    status = runner.main(["--out", str(tmp_path), "--markdown", str(md)])
    assert status == 1
    doc = json.loads((tmp_path / "bench-latest.json").read_text())
    assert [s["suite"] for s in doc["suites"]] == ["broken", "fake"]
    assert doc["suites"][0]["error"] == "RuntimeError: bench exploded" and doc["suites"][1]["error"] is None
    assert [r["case"] for r in doc["rows"]] == [
        "FAILED: RuntimeError: bench exploded",
        "wrapped call",
        "detail only in JSON",
    ]
    machine = doc["machine"]
    assert machine["logical_cores"] >= 1 and len(machine["load_average"]) == 3
    assert machine["packages"]["handoffmon"] and machine["python"].count(".") == 2
    assert doc["parameters"] == {"quick": False, "suites": ["broken", "fake"]}
    table = md.read_text()
    assert "| fake | wrapped call | 12.3 | 99.0 | µs | 1.50 (wrapped ÷ direct p50) | n=10 |" in table
    assert "detail only in JSON" not in table
    assert "load average" in table


def test_only_and_skip_select_suites(fake_suites: None, tmp_path: Path) -> None:
    """--only/--skip decide which suites run; a clean run exits 0."""
    assert runner.main(["--out", str(tmp_path), "--only", "fake", "broken", "--skip", "broken"]) == 0
    doc = json.loads((tmp_path / "bench-latest.json").read_text())
    assert [s["suite"] for s in doc["suites"]] == ["fake"]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "—"),
        (0.0, "0"),
        (0.01234, "0.012"),
        (3.14159, "3.14"),
        (31.4159, "31.4"),
        (314.159, "314"),
        (31415.9, "31,416"),
    ],
)
def test_numbers_keep_three_significant_digits(value: float | None, text: str) -> None:
    """Table cells: about three significant digits, thousands separated."""
    assert runner._fmt(value) == text


def test_refit_target_reports_cpu_and_wall_against_the_target() -> None:
    """The K = 100 refit row says, in the JSON, CPU and wall seconds and which meets 1 s."""
    from tests.benchmarks.suites import _target

    ok_cpu = _target(1.4, 1.6, [0.9], 1.0)
    assert ok_cpu["cpu_p50_s"] == 0.9 and ok_cpu["wall_p50_s"] == 1.4 and ok_cpu["wall_p99_s"] == 1.6
    assert ok_cpu["meets_target_cpu"] is True and ok_cpu["meets_target_wall"] is False
    slow = _target(0.8, 0.95, [1.2], 1.0)
    assert slow["meets_target_cpu"] is False and slow["meets_target_wall"] is True
    assert _target(0.5, 0.5, [], 1.0)["meets_target_cpu"] is False
