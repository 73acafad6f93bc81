"""The switch-matrix cache stores any reply text, and only whole files (audit 2026-12-07).

A model reply holding a lone surrogate (JSON ``"\\ud800"`` from a provider decodes to one) made
``put`` raise ``UnicodeEncodeError`` while writing the UTF-8 temp file: the matrix stopped
(exit 5), the half-written ``<entry>.tmp`` stayed, and every rerun stopped at the same reply.
The fixed temp name was also shared by two matrices writing one --cache.
"""

from __future__ import annotations

from pathlib import Path

from handoffmon.evals.switch import DiskCache

FP = {"seed": 0, "deployment": "sim", "names": "x"}


def test_a_reply_with_a_lone_surrogate_round_trips_and_leaves_no_temp_file(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path)
    value = {"turns": [{"reply": "hola \ud800 amigo", "author": "atlas"}], "note": "ünï ✓"}
    cache.put("prefix", "drift", "ep#0", "atlas@T2", value, FP)
    assert cache.get("prefix", "drift", "ep#0", "atlas@T2", FP) == value
    files = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert len(files) == 1 and files[0].endswith(".json"), files
