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


def test_the_results_database_stores_a_reply_with_a_lone_surrogate(tmp_path: Path) -> None:
    """``eval run --db``: the reply and an extracted value are stored with the surrogate escaped,
    and the next turn stores normally (the INSERT raised UnicodeEncodeError, not a sqlite3.Error,
    so its transaction stayed open and the next turn's BEGIN failed too)."""
    from handoffmon.evals.store import ResultStore, Row, StoredTurn

    def row(turn: int, extracted: str | None) -> Row:
        return Row("s", "m", 0, turn, "r", "pass", "", extracted, True, False, "atlas", 1)

    with ResultStore(tmp_path / "e.sqlite") as store:
        store.add_turn(StoredTurn(1, "hi", "hola \ud800", "atlas", 1), "s", "m", 0, 1, [row(1, "x\udc80")])
        store.add_turn(StoredTurn(2, "and?", "bien", "atlas", 2), "s", "m", 0, 2, [row(2, None)])
        turns = store.stored_turns("s", "m", 0)
        extracted = [r.extracted for r in store.rows()]
    assert [t.reply for t in turns] == ["hola \\ud800", "bien"]
    assert extracted == ["x\\udc80", None]
