"""`handoffmon refit`: CSV and SQLite sources to a refit JSON, overrides, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from handoffmon.cli import main
from handoffmon.pipeline.aggregates import Aggregates
from handoffmon.refit import RefitResult
from handoffmon.sources.csv import write_cells_csv, write_transitions_csv
from tests.refit.synth import plant, synth_counts
from tests.sources.replica import synthetic_turns


def test_refit_from_csv_writes_versioned_json(tmp_path: Path) -> None:
    """cells.csv + transitions.csv → refit.json with every rule plus 'all'; --min-n and --compact apply."""
    rng = np.random.default_rng(0)
    counts = synth_counts(plant(4, 2, rng), rng, n_pair=100, n_trans=50)
    write_cells_csv(counts, tmp_path / "cells.csv")
    write_transitions_csv(counts, tmp_path / "t.csv")
    out = tmp_path / "refit.json"
    args = ["refit", "--source", str(tmp_path / "cells.csv"), "--transitions", str(tmp_path / "t.csv")]
    res = CliRunner().invoke(main, [*args, "--out", str(out), "--min-n", "40", "--compact"])
    assert res.exit_code == 0, res.output
    result = RefitResult.from_json(out.read_text())
    assert set(result.rules) == {"r0", "r1", "all"} and result.min_n == 40
    assert out.read_text().count("\n") == 1  # --compact: one line
    # the buckets come from the data (synth_counts uses the first 7 default edges), not the 12 defaults
    assert result.buckets == ("1", "2", "3-4", "5-8", "9-12", "13-16", "17+")
    # chains are published only with >= 30 (refit.markov_min_transitions) transitions out of each state
    out_of: dict[tuple[str, str], int] = {}
    for key, c in counts.transitions.items():
        if key.rule == "r0":
            out_of[key.model, key.from_verdict] = out_of.get((key.model, key.from_verdict), 0) + c
    published = {m for m in ("m00", "m01", "m02", "m03") if min(out_of[m, "pass"], out_of[m, "fail"]) >= 30}
    assert set(result.rules["r0"].markov) == published and 0 < len(published) < 4
    assert all(result.rules["r0"].markov[m].n_transitions == 100 for m in published)
    assert "observed pair(s)" in res.output


def test_refit_from_sqlite_aggregates(tmp_path: Path) -> None:
    """sqlite:///PATH reads a monitor's persisted aggregates."""
    db = tmp_path / "agg.sqlite"
    agg = Aggregates(str(db))
    for turn in synthetic_turns(5, 400):
        agg.add_turn(turn)
    agg.flush()
    agg.close()
    res = CliRunner().invoke(main, ["refit", "--source", f"sqlite://{db}", "--out", "-", "--min-n", "5"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout[: res.stdout.rindex("}") + 1])
    assert set(doc["rules"]) == {"json", "lang", "all"} and doc["observational"] is True


def test_refit_errors_exit_1_with_the_reason(tmp_path: Path) -> None:
    """A malformed CSV exits 1 naming file, line and column; nothing is written."""
    bad = tmp_path / "cells.csv"
    bad.write_text("rule,prefix_model,model,depth_bucket,n,passes\nr,a,b,2,x,1\n")
    out = tmp_path / "o.json"
    res = CliRunner().invoke(main, ["refit", "--source", str(bad), "--out", str(out)])
    assert res.exit_code == 1
    assert "line 2, column 'n'" in res.output and not out.exists()


def test_refit_from_prometheus_with_window_records_the_window(tmp_path: Path) -> None:
    """prometheus://HOST:PORT --window 1h: each metric's raw series over the hour, window_s = 3600
    in the JSON."""
    from tests.sources.fakeprom import fake_prometheus

    with fake_prometheus() as (url, seen):
        res = CliRunner().invoke(
            main, ["refit", "--source", url, "--window", "1h", "--out", "-", "--min-n", "1"]
        )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout[: res.stdout.rindex("}") + 1])
    assert doc["window_s"] == 3600.0 and doc["source"].startswith("http://127.0.0.1:")
    assert all("[1h:" in p["query"] for p in seen)


def _csv_inputs(tmp_path: Path) -> list[str]:
    rng = np.random.default_rng(2)
    counts = synth_counts(plant(3, 1, rng), rng, n_pair=100, n_trans=50)
    write_cells_csv(counts, tmp_path / "cells.csv")
    write_transitions_csv(counts, tmp_path / "t.csv")
    return ["--source", str(tmp_path / "cells.csv"), "--transitions", str(tmp_path / "t.csv")]


def test_metrics_file_holds_the_refit_gauges_in_text_format(tmp_path: Path) -> None:
    """--metrics-file writes the same gauges the in-process exporter publishes, parseable by Prometheus."""
    from prometheus_client.parser import text_string_to_metric_families

    prom = tmp_path / "refit.prom"
    out = tmp_path / "refit.json"
    res = CliRunner().invoke(
        main, ["refit", *_csv_inputs(tmp_path), "--out", str(out), "--metrics-file", str(prom)]
    )
    assert res.exit_code == 0, res.output
    result = RefitResult.from_json(out.read_text())
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(prom.read_text())
        for s in fam.samples
    }
    # a job's fit over the deployment's counts: every gauge says fit="pooled"
    key = ("handoffmon_prefix_influence", (("fit", "pooled"), ("model", "m01"), ("rule", "all")))
    assert samples[key] == result.rules["all"].models["m01"].prefix_influence
    pooled = (("fit", "pooled"),)
    assert samples[("handoffmon_refit_last_success_timestamp_seconds", pooled)] == result.created_at
    assert samples[("handoffmon_refit_input_repaired_cells", pooled)] == result.input_repaired_cells
    assert all(dict(labels).get("fit") == "pooled" for _, labels in samples)
    assert not any(name.startswith("handoffmon_checks") for name, _ in samples)  # only refit gauges


def test_pushgateway_receives_the_gauges_under_job_handoffmon(tmp_path: Path) -> None:
    """--pushgateway PUTs the text exposition to /metrics/job/handoffmon (the scrape job)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    got: list[tuple[str, str, bytes]] = []

    class Gateway(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((self.command, self.path, body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Gateway)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        gateway = f"127.0.0.1:{server.server_address[1]}"
        args = ["refit", *_csv_inputs(tmp_path), "--out", str(tmp_path / "r.json"), "--pushgateway", gateway]
        res = CliRunner().invoke(main, args)
    finally:
        server.shutdown()
        server.server_close()
    assert res.exit_code == 0, res.output
    assert got and got[0][:2] == ("PUT", "/metrics/job/handoffmon")
    assert b"handoffmon_handoff_risk{" in got[0][2]


def test_unreachable_pushgateway_exits_1(tmp_path: Path) -> None:
    """A Pushgateway that cannot be reached is an error of the job (exit 1), with the reason."""
    from tests.conftest import free_port

    args = ["refit", *_csv_inputs(tmp_path), "--out", str(tmp_path / "r.json")]
    res = CliRunner().invoke(main, [*args, "--pushgateway", f"127.0.0.1:{free_port()}"])
    assert res.exit_code == 1 and "error:" in res.output


def _file_samples(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(path.read_text())
        for s in fam.samples
    }


def test_failed_refit_adds_its_time_to_the_metrics_file_and_keeps_the_last_success(tmp_path: Path) -> None:
    """Like the Pushgateway's POST, a failed refit (here: no checks, exit 4) writes
    handoffmon_refit_last_failure_timestamp_seconds into --metrics-file next to the last
    success's gauges, so RefitFailing (failure newer than success) can fire; a second failure
    replaces the first's time (one series), and a later success rewrites the file without it."""
    import time

    prom, out = tmp_path / "handoffmon_refit.prom", tmp_path / "refit.json"
    fail_name, ok_name = (
        "handoffmon_refit_last_failure_timestamp_seconds",
        "handoffmon_refit_last_success_timestamp_seconds",
    )
    pooled = (("fit", "pooled"),)  # the same fit label as the job's success gauges
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    # no earlier success: the file holds the failure alone
    before = time.time()
    res = CliRunner().invoke(
        main, ["refit", "--source", str(empty), "--out", str(out), "--metrics-file", str(prom)]
    )
    assert res.exit_code == 4, res.output
    assert set(_file_samples(prom)) == {(fail_name, pooled)}
    assert before <= _file_samples(prom)[(fail_name, pooled)] <= time.time()
    # a success, then two failures
    res = CliRunner().invoke(
        main, ["refit", *_csv_inputs(tmp_path), "--out", str(out), "--metrics-file", str(prom)]
    )
    assert res.exit_code == 0, res.output
    success = _file_samples(prom)
    assert (fail_name, pooled) not in success
    for _ in range(2):
        res = CliRunner().invoke(
            main, ["refit", "--source", str(empty), "--out", str(out), "--metrics-file", str(prom)]
        )
        assert res.exit_code == 4, res.output
    after = _file_samples(prom)
    assert after.pop((fail_name, pooled)) > after[(ok_name, pooled)]
    assert after == success  # the last success's gauges stay
    text = prom.read_text()
    assert text.count(f"# TYPE {fail_name} gauge") == 1 and not list(tmp_path.glob("*.tmp"))


def test_refit_empty_turn_log_exits_4_no_rows(tmp_path: Path) -> None:
    """An empty turn log (JSONL with no lines, CSV with only its header) is NO_DATA (exit 4,
    "no rows"), not "missing column(s)" with exit 1."""
    (tmp_path / "t.jsonl").write_text("")
    (tmp_path / "t.csv").write_text("conversation_id,depth,model,prefix_model,rule,verdict\n")
    for name in ("t.jsonl", "t.csv"):
        src = tmp_path / name
        res = CliRunner().invoke(main, ["refit", "--source", str(src), "--out", str(tmp_path / "o.json")])
        assert res.exit_code == 4, res.output
        assert f"error: {src}: no rows" in res.stderr and not (tmp_path / "o.json").exists()


def test_refit_bare_sqlite_path_suggests_the_sqlite_url_that_reads_it() -> None:
    """`--source handoffmon.db` suggests sqlite://handoffmon.db (relative), not sqlite:///PATH,
    which for that file would read /handoffmon.db; an absolute path keeps its leading slash."""
    res = CliRunner().invoke(main, ["refit", "--source", "handoffmon.db", "--out", "-"])
    assert res.exit_code == 1 and "read as sqlite://handoffmon.db" in res.stderr, res.output
    res = CliRunner().invoke(main, ["refit", "--source", "/var/lib/h.db", "--out", "-"])
    assert "read as sqlite:///var/lib/h.db" in res.stderr, res.output
    res = CliRunner().invoke(main, ["refit", "--source", "counts.txt", "--out", "-"])
    assert "sqlite://handoffmon.db relative, sqlite:///abs/path.db absolute" in res.stderr, res.output


def test_refit_too_thin_for_any_pair_hints_at_min_n_and_the_largest_cell(tmp_path: Path) -> None:
    """No handoff cell reaching refit.min_n used to print mu=nan and nothing else: the hint names
    min_n and the largest handoff cell's count. Exit stays 0 (the curves and Markov decay are
    written); no hint once a pair is observed."""
    src = tmp_path / "thin.csv"
    src.write_text("rule,prefix_model,model,depth_bucket,n,passes\nr,a,b,2,5,3\nr,b,a,2,4,2\nr,a,a,2,6,5\n")
    res = CliRunner().invoke(main, ["refit", "--source", str(src), "--out", str(tmp_path / "o.json")])
    assert res.exit_code == 0 and (tmp_path / "o.json").exists(), res.output
    assert "refit.min_n=30" in res.stderr and "largest handoff cell: 5 (a->b)" in res.stderr
    assert "nan" not in res.stderr  # said: mu and the adjusted R² are not estimable
    assert "mu=n/a (no observed pair) adjusted r2=n/a (too few pairs)" in res.stderr
    res = CliRunner().invoke(
        main, ["refit", "--source", str(src), "--out", str(tmp_path / "o.json"), "--min-n", "2"]
    )
    assert res.exit_code == 0 and "1 observed pair(s)" in res.stderr and "hint:" not in res.stderr
