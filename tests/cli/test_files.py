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
