"""Output files: written whole through a temp file of the writer's own, or not at all."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from handoffmon.cli.files import write_text_atomic
from handoffmon.errors import InputError


def test_a_writer_still_writing_its_temp_file_cannot_corrupt_another_writers_output(tmp_path: Path) -> None:
    """Two overlapping jobs writing one --out: the first is mid-write in its temp file when the
    second writes. The temp file was one fixed name (`out.json.tmp`): the second truncated the
    first's, renamed it into place, and the first's remaining bytes then landed inside the
    second's output (a NUL-padded mix). Each writer now renames a temp file of its own."""
    out = tmp_path / "out.json"
    first = open(tmp_path / "out.json.tmp", "w", encoding="utf-8")  # noqa: SIM115 - held open on purpose
    first.write('{"writer": "first", "part": 1')
    first.flush()
    write_text_atomic(str(out), '{"writer": "second"}')
    first.write(', "part": 2}\n')
    first.close()
    assert out.read_text(encoding="utf-8") == '{"writer": "second"}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "out.json.tmp"]  # the first's own


def test_the_output_gets_the_umasks_permissions_and_no_temp_file_stays(tmp_path: Path) -> None:
    """The file is created as open() would create it (0o666 less the umask), not 0o600 as a
    mkstemp file would be: a report or textfile another user (node_exporter) reads stays readable."""
    old = os.umask(0o022)
    try:
        write_text_atomic(str(tmp_path / "r.prom"), "x 1")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.prom").stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["r.prom"]


def test_a_failed_write_names_the_file_and_leaves_nothing(tmp_path: Path) -> None:
    """Writing into a directory that is not there: InputError naming the path, no temp file."""
    with pytest.raises(InputError, match="cannot write"):
        write_text_atomic(str(tmp_path / "missing" / "out.json"), "{}")
    assert list(tmp_path.iterdir()) == []


def test_output_to_stdout_keeps_stdout_machine_readable(tmp_path: Path) -> None:
    """`check --output -` printed its JSONL verdicts and then the summary (a pretty JSON object
    with --json, a table without) on stdout, and `ifeval --output -` its results then the
    accuracy lines: neither stream parsed as JSONL. The summary goes to stderr then, as
    `eval compare --out -` already does."""
    import json

    from click.testing import CliRunner

    from handoffmon.cli import main

    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "rules: [{name: short, check: length, params: {unit: words, max: 2}}]\n", encoding="utf-8"
    )
    replies = tmp_path / "replies.jsonl"
    replies.write_text('{"reply": "one two three"}\n{"reply": "one"}\n', encoding="utf-8")
    inputs = tmp_path / "input.jsonl"
    inputs.write_text(
        '{"key": 1, "prompt": "p", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}\n',
        encoding="utf-8",
    )
    responses = tmp_path / "responses.jsonl"
    responses.write_text('{"prompt": "p", "response": "a, b"}\n', encoding="utf-8")
    for args, summary in (
        (
            ["check", "--rules", str(rules), "--input", str(replies), "--output", "-", "--json"],
            '"replies": 2',
        ),
        (["check", "--rules", str(rules), "--input", str(replies), "--output", "-"], "2 replies, 1 rules"),
        (["ifeval", "--input", str(inputs), "--responses", str(responses), "--output", "-"], "prompt-level"),
    ):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 0, (args, res.output)
        rows = [json.loads(line) for line in res.stdout.splitlines()]
        assert rows and all(isinstance(r, dict) for r in rows)
        assert summary in res.stderr and summary not in res.stdout


def test_report_to_stdout_is_the_page_alone(tmp_path: Path) -> None:
    """`report --out -` printed the page and then 'wrote - (55 KiB, 2 fits)' on stdout, after
    </html>; the line goes to stderr, as the other commands' summaries do."""
    from click.testing import CliRunner

    from handoffmon.cli import main
    from handoffmon.depth import DepthBuckets
    from handoffmon.refit import refit
    from handoffmon.sim.fleet import make_fleet
    from handoffmon.sim.offline import simulate_counts

    src = tmp_path / "refit.json"
    fit = refit(simulate_counts(make_fleet(3, n_rules=1), 300, seed=1), buckets=DepthBuckets(), now=0.0)
    src.write_text(fit.to_json(), encoding="utf-8")
    res = CliRunner().invoke(main, ["report", str(src), "--out", "-"])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("<!doctype html>") and res.stdout.rstrip().endswith("</html>")
    assert "wrote -" in res.stderr


def test_a_lone_surrogate_is_written_as_its_escape_and_no_temp_file_stays(tmp_path: Path) -> None:
    """A model named "\\ud800bad" in a refit JSON (valid JSON) made `handoffmon report` die in the
    UTF-8 encoder with a traceback, leaving its temp file behind; the page is written, the name
    spelled as its escape as labels are, and a write that raises leaves no temp file."""
    import json

    from click.testing import CliRunner

    from handoffmon.cli import main
    from handoffmon.depth import DepthBuckets
    from handoffmon.refit import refit
    from handoffmon.sim.fleet import make_fleet
    from handoffmon.sim.offline import simulate_counts

    fit = refit(simulate_counts(make_fleet(3, n_rules=1), 300, seed=1), buckets=DepthBuckets(), now=0.0)
    name = sorted(fit.rules["all"].models)[0]
    src = tmp_path / "refit.json"
    src.write_text(fit.to_json().replace(f'"{name}"', json.dumps("\ud800bad")), encoding="utf-8")
    out = tmp_path / "r.html"
    res = CliRunner().invoke(main, ["report", str(src), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "\\ud800bad" in out.read_text(encoding="utf-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "refit.json"]
