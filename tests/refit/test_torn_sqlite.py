"""A worker's crash tears the SQLite aggregates file; the refit repairs and lists what it tore.

A worker writes its aggregate increments to the file at its idle turns, and each conversation's
partial counts (y_c, n_c per cell, which the cluster sums' increments are computed from) to the
store at every turn. A crash between the two loses the increments and keeps the partial counts:
the conversations' next checks, on another worker, add cross terms whose checks the file never
got, a conversation whose first check in a cell was lost is missing from G, and a session length
is moved (−1) from a depth whose +1 was lost. Small cells then break the relations the refit's
input check holds a file to, and stay broken in it for good.

Here a real ``Monitor`` (``sim.live``: real attribution, checkers, conversation state in the
SQLite store) serves the first turns of a clustered population, loses the increments of its last
flush (its process dies before its idle turn: the write step is all that is replaced), and a
second ``Monitor`` on the same file continues every conversation. Before the fix the file's
strict read refused the negative session length and, past that, the exact check refused the
torn cells, so ``handoffmon refit`` and every periodic refit of the workers sharing the file
failed from the crash on (RefitFailing) and published nothing.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from handoffmon.cli import main
from handoffmon.config import RefitConfig
from handoffmon.depth import DepthBuckets
from handoffmon.errors import InputError
from handoffmon.ingress import RequestParser
from handoffmon.pipeline.aggregates import Aggregates, load_counts_sqlite
from handoffmon.pipeline.monitor import Monitor
from handoffmon.refit import refit
from handoffmon.sim.calibration import standard_population
from handoffmon.sim.live import live_config, send_turn
from handoffmon.sim.population import TurnRows, simulate

BUCKETS = DepthBuckets()
CRASH_DEPTH = 3
"""The dying worker's last, lost flush holds every conversation's turn at this depth."""


class _DiesBeforeItsIdleTurn(Aggregates):
    """The aggregates of a worker that is killed: once ``dead``, nothing more reaches the file."""

    dead = False

    def flush(self, *, final: bool = False) -> None:
        if not self.dead:
            super().flush(final=final)


def _serve(rows: TurnRows, monitor: Monitor, lo: int, hi: int, histories: dict[int, list[Any]]) -> None:
    """Every conversation's turns at depths lo..hi, depth by depth (as traffic interleaves them),
    each with its whole history so far (the client keeps it across the crash)."""
    parser = RequestParser.from_config(monitor.config)
    sel = (rows.depth >= lo) & (rows.depth <= hi)
    order = np.lexsort((rows.rule[sel], rows.conversation[sel], rows.depth[sel]))
    conv, depth, model, rule, verdict = (
        a[sel][order].tolist() for a in (rows.conversation, rows.depth, rows.model, rows.rule, rows.verdict)
    )
    i = 0
    while i < len(conv):
        c, d, m = conv[i], depth[i], model[i]
        passes: dict[int, bool] = {}
        while i < len(conv) and conv[i] == c and depth[i] == d:
            passes[rule[i]] = verdict[i] == 0
            i += 1
        send_turn(monitor, parser, histories.setdefault(c, []), c, d, rows.names[m], passes)
    monitor.flush()


@pytest.fixture(scope="module")
def torn_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rows = simulate(replace(standard_population(rules=1), not_applicable_rate=0.0), 60, seed=13)
    db = tmp_path_factory.mktemp("torn") / "hm.sqlite"
    config = live_config(rows, BUCKETS, store={"backend": "sqlite", "path": str(db)})
    histories: dict[int, list[Any]] = {}
    dying = _DiesBeforeItsIdleTurn(str(db))
    first = Monitor(config, aggregates=dying)
    _serve(rows, first, 1, CRASH_DEPTH - 1, histories)
    dying.dead = True
    _serve(rows, first, CRASH_DEPTH, CRASH_DEPTH, histories)
    first.close()  # its final flush is lost too: the process is gone
    with Monitor(config) as second:
        _serve(rows, second, CRASH_DEPTH + 1, 10**6, histories)
    return db


def test_the_crash_really_tears_the_file(torn_file: Path) -> None:
    """What the fix is for: a negative session length and cells no conversations can give,
    which a refit that refuses them cannot get past."""
    with sqlite3.connect(torn_file) as conn:
        negative = conn.execute(
            "SELECT count(*) FROM handoffmon_counts WHERE kind = 'session_lengths' AND value < 0"
        ).fetchone()[0]
    assert negative >= 1
    counts = load_counts_sqlite(torn_file, strict=True)
    assert all(n > 0 for n in counts.session_lengths.values())  # read as 0, not carried
    with pytest.raises(InputError, match="no set of conversations gives these sums"):
        refit(counts, buckets=BUCKETS, settings=RefitConfig(min_n=5), now=0.0, exact=True)


def test_handoffmon_refit_repairs_and_lists_the_torn_cells(torn_file: Path) -> None:
    res = CliRunner().invoke(
        main, ["refit", "--source", f"sqlite://{torn_file}", "--out", "-", "--min-n", "5"]
    )
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    counts = load_counts_sqlite(torn_file, strict=True)
    with pytest.raises(InputError) as refused:
        refit(counts, buckets=BUCKETS, settings=RefitConfig(min_n=5), now=0.0, exact=True)
    repairs = doc["input_repairs"]
    assert doc["input_repaired_cells"] == len(repairs) >= 1
    first = repairs[0]
    assert f"cell {first['rule']} {first['prefix_model']}->{first['model']}:" in str(refused.value)
    assert all(r["action"] in ("one_conversation", "conversations_dropped") for r in repairs)
    assert f"{first['rule']} {first['prefix_model']}->{first['model']}" in res.stderr


def test_the_periodic_refit_of_the_workers_sharing_the_file_carries_on(
    torn_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers' in-process refit reads the file as the CLI does: it publishes, with the torn
    cells counted (``handoffmon_refit_input_repaired_cells``: RefitInputRepaired), and counts no
    refit failure."""
    import shutil

    from handoffmon.runtime import build_runtime
    from tests.pipeline.helpers import make_config

    db = tmp_path / "hm.sqlite"
    shutil.copy(torn_file, db)
    where = tmp_path / "multiproc"
    where.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(where))
    config = make_config(refit={"interval_s": 60, "min_n": 5}, store={"backend": "sqlite", "path": str(db)})
    with build_runtime(config, registry=None, start=False) as rt:
        assert rt.refit is not None and rt.refit.exact
        result = rt.refit_now()
        assert result is not None, rt.refit.stats.last_error
        assert result.source == "sqlite" and result.input_repaired_cells >= 1
        assert rt.refit.stats.failures == 0
        assert "refit" not in rt.monitor.aggregates.snapshot().monitor_errors
