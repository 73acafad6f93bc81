"""``shapes export --source sqlite://PATH`` reads PATH as SQLite whatever its suffix (audit 2026-12-07).

A source ending in ``.json`` was taken for a refit.json before its scheme was looked at:
``sqlite://agg.json`` (a monitor's ``store.path: agg.json``) failed with "sqlite://agg.json:
cannot read: No such file or directory" although the file was there.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from click.testing import CliRunner

from handoffmon.cli import main
from handoffmon.depth import DepthBuckets
from handoffmon.pipeline.monitor import Monitor
from handoffmon.sim.calibration import standard_population
from handoffmon.sim.live import live_config, replay
from handoffmon.sim.population import simulate
from handoffmon.stores.memory import MemoryStore


def test_a_sqlite_store_named_json_is_read_as_sqlite(tmp_path: Path) -> None:
    rows = simulate(replace(standard_population(rules=1), not_applicable_rate=0.0), 20, seed=3)
    db = tmp_path / "agg.json"
    config = live_config(rows, DepthBuckets(), store={"backend": "sqlite", "path": str(db)})
    with Monitor(config, store=MemoryStore()) as monitor:
        replay(rows, monitor)
    out = tmp_path / "shapes.json"
    res = CliRunner().invoke(main, ["shapes", "export", "--source", f"sqlite://{db}", "--out", str(out)])
    assert res.exit_code == 0, res.output
    shapes = json.loads(out.read_text(encoding="utf-8"))
    assert shapes["source"] == f"sqlite://{db}" and shapes["rules"]


def test_a_missing_sqlite_file_named_json_is_said_to_be_missing_sqlite(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        main, ["shapes", "export", "--source", f"sqlite://{tmp_path}/none.json", "--out", "-"]
    )
    assert res.exit_code == 1
    assert "no such SQLite file" in res.output, res.output
