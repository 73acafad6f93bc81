"""``runtime.background.Background``'s ``on_drop``: every call that leaves without being taken."""

from __future__ import annotations

import pytest

from handoffmon.runtime import background as bg


def test_on_drop_gets_every_call_that_leaves_untaken(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pushed out past a bound, replaced under its id, found expired by ``take`` or by a later
    park, forgotten: each handed to ``on_drop`` once; a taken call never."""
    monkeypatch.setattr(bg, "MAX_PARKED", 2)
    now = [0.0]
    gone: list[str] = []
    parked = bg.Background(lambda ctx: 1, clock=lambda: now[0], on_drop=lambda p: gone.append(p.ctx))
    for name in ("a", "b", "c"):
        parked.park(name, name, 0.0)
    assert gone == ["a"]  # past MAX_PARKED
    parked.park("b", "b2", 0.0)
    assert gone == ["a", "b"]  # replaced under its id
    got = parked.take("c")
    assert got is not None and got.ctx == "c" and gone == ["a", "b"]  # taken: not dropped
    parked.forget("b")
    parked.forget("b")  # twice: once
    assert gone == ["a", "b", "b2"] and len(parked) == 0 and parked.held == 0
    parked.park("old", "old", 0.0)
    now[0] = bg.PARKED_TTL_S + 1
    assert parked.take("old") is None and gone[-1] == "old"  # expired when taken
    parked.park("older", "older", 0.0)
    now[0] += bg.PARKED_TTL_S + 1
    parked.park("new", "new", 0.0)  # parking expires what is older
    assert gone[-1] == "older" and len(gone) == 5 and len(parked) == 1
    parked.park("last", "last", now[0])
    parked.clear()  # a serve shutting down
    assert gone[-2:] == ["new", "last"] and len(parked) == 0 and parked.held == 0
