"""Label caps under PROMETHEUS_MULTIPROC_DIR bound the names of all workers together.

Two real processes write one multiprocess directory through prometheus_client; each sees 15
models (10 of them shared, in opposite orders) under ``max_models: 10``. Per-process caps let
the scrape show 20 model values and split a model's turns between its name (in one worker) and
``other`` (in the other); a shared admitted set keeps ≤ 10 and maps every model alike.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from handoffmon.exporters.serving import multiprocess_registry
from handoffmon.labels import LabelGuard
from tests.exporters.turns import only, parse_exposition
from tests.exporters.workers import worker_said

ROOT = Path(__file__).resolve().parents[2]
CAP, TURNS = 10, 3
FIRST = [f"m{i}" for i in range(15)]
SECOND = [f"m{i}" for i in [*range(10, 20), *range(5)]]


def test_two_workers_share_one_model_cap(tmp_path: Path) -> None:
    """Both workers together keep ≤ CAP model values, no model's turns are split between its
    name and ``other``, nothing is lost, and handoffmon_label_values (max mode) reads the cap."""
    mp_dir, go = tmp_path / "mp", tmp_path / "go"
    mp_dir.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(mp_dir), "PYTHONPATH": str(ROOT)}
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.exporters.mp_labels_worker",
                str(CAP),
                ",".join(m),
                str(TURNS),
                str(go),
            ],
            env=env,
            cwd=ROOT,
        )
        for m in (FIRST, SECOND)
    ]
    go.touch()
    assert [w.wait(60) for w in workers] == [0, 0]
    s = parse_exposition(generate_latest(multiprocess_registry(str(mp_dir))).decode())
    turns: dict[str, float] = defaultdict(float)
    for labels, value in only(s, "handoffmon_turns_total").items():
        turns[dict(labels)["model"]] += value
    named = {m for m in turns if m != "other"}
    assert len(named) == CAP, sorted(turns)
    sent = {m: TURNS * ((m in FIRST) + (m in SECOND)) for m in {*FIRST, *SECOND}}
    for model in named:  # a model kept its name in both workers: all its turns are under it
        assert turns[model] == sent[model], (model, dict(turns))
    assert turns["other"] == sum(n for m, n in sent.items() if m not in named)
    values = only(s, "handoffmon_label_values")
    assert values[(("label", "model"),)] == CAP


def test_guards_of_one_directory_map_names_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Within one directory every guard admits the first ``cap`` names written there, whatever
    order it meets them in; without a directory (the default) a guard caps on its own."""
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    a, b = LabelGuard(max_models=2, shared_dir=tmp_path), LabelGuard(max_models=2, shared_dir=tmp_path)
    assert [a.model(m) for m in ("x", "y", "z")] == ["x", "y", "other"]
    assert [b.model(m) for m in ("z", "y", "x", "w")] == ["other", "y", "x", "other"]
    assert b.usage()["model"] == (2, 2) and b.models >= {"x", "y"}
    alone = LabelGuard(max_models=2, shared_dir=None)
    assert [alone.model(m) for m in ("z", "w")] == ["z", "w"]


def test_unusable_directory_falls_back_to_a_per_process_cap(tmp_path: Path) -> None:
    """A shared directory that cannot be written never breaks labelling: the cap applies per process."""
    guard = LabelGuard(max_models=1, shared_dir=tmp_path / "missing")
    assert [guard.model(m) for m in ("x", "y")] == ["x", "other"]


def _admit(mp_dir: Path, names: str) -> list[str]:
    """The labels a worker process capped at 2 models (started, run to its end) gives ``names``."""
    labels: list[str] = json.loads(worker_said(mp_dir, "mp_admit_worker", "2", names))
    return labels


def test_names_admitted_before_a_restart_do_not_keep_their_places(tmp_path: Path) -> None:
    """The admitted names outlive their workers' metric files (LiteLLM's proxy empties only the
    directory's ``*.db`` at start): once those are wiped the next worker starts from no names, so a
    replaced fleet's names do not hold the cap forever; while the files stay (their series are
    still served), a worker started after the others keeps mapping their names alike. The
    multiprocess collector still reads the directory."""
    assert _admit(tmp_path, "old-a,old-b,old-c") == ["old-a", "old-b", "other"]
    assert _admit(tmp_path, "old-c,new-a,old-b") == ["other", "other", "old-b"]  # files kept
    for db in tmp_path.glob("*.db"):  # a restart: LiteLLM's wipe_directory
        db.unlink()
    files = list(tmp_path.glob("handoffmon_labels_*.jsonl"))
    assert files and any("old-a" in f.read_text() for f in files)
    assert _admit(tmp_path, "new-a,new-b,old-a") == ["new-a", "new-b", "other"]
    assert not any("old-" in f.read_text() for f in tmp_path.glob("handoffmon_labels_*.jsonl"))
    assert list(tmp_path.glob("*.db"))  # the markers, which the collector reads as no sample
    assert list(multiprocess_registry(str(tmp_path)).collect()) == []
