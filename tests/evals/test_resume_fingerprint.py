"""eval run resumes stored turns only under the fingerprint they were made with (seed, deployment, names)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import yaml
from click.testing import CliRunner

from handoffmon.cli import main

SCRIPT = {
    "id": "fp",
    "runs": 2,
    "rules": [{"name": "no_commas", "check": "no_commas"}],
    "turns": [{"user": "Where is my order?", "checkpoint": True}, {"user": "And now?", "checkpoint": True}],
}


def _replies(db: Path) -> dict[tuple[int, int], str]:
    with sqlite3.connect(db) as c:
        return {(r, t): reply for r, t, reply in c.execute("SELECT run, turn, reply FROM turns")}


def _run(tmp_path: Path, *args: str) -> tuple[int, str]:
    script = tmp_path / "fp.yaml"
    script.write_text(yaml.safe_dump(SCRIPT), encoding="utf-8")
    res = CliRunner().invoke(
        main, ["eval", "run", str(script), "--db", str(tmp_path / "e.sqlite"), "--no-progress", *args]
    )
    return res.exit_code, res.output


def test_a_rerun_with_another_seed_is_refused_then_discarded_on_request(tmp_path: Path) -> None:
    """--seed 99 over seed-0 turns: exit 1 naming the seed change and the way out; nothing is touched."""
    sim = ["--router", "sim:3", "--model", "sim-00"]
    code, out = _run(tmp_path, *sim)
    assert code == 0, out
    db = tmp_path / "e.sqlite"
    before = _replies(db)
    code, out = _run(tmp_path, *sim)
    assert code == 0 and "0 turn(s) generated, 4 resumed" in out, out  # same fingerprint: resumed
    code, out = _run(tmp_path, *sim, "--seed", "99")
    assert code == 1, out
    assert "seed 0 -> 99" in out and "--discard-stale" in out and "new --db" in out, out
    assert _replies(db) == before
    code, out = _run(tmp_path, *sim, "--seed", "99", "--discard-stale")
    assert code == 0 and "4 turn(s) generated, 0 resumed (2 stale run(s) discarded)" in out, out
    assert set(_replies(db)) == set(before)
    code, out = _run(tmp_path, *sim, "--seed", "99")
    assert code == 0 and "0 turn(s) generated, 4 resumed" in out, out


def _router(path: Path, model: str) -> str:
    deployment = {"model_name": "chat", "litellm_params": {"model": model, "mock_response": "hola amigo"}}
    path.write_text(yaml.safe_dump({"model_list": [deployment]}), encoding="utf-8")
    return str(path)


def test_a_changed_router_deployment_or_name_map_is_not_resumed(tmp_path: Path) -> None:
    """Group chat pointed at another model, or another canonical-name map: refused, naming the change."""
    router = _router(tmp_path / "router.yaml", "openai/gpt-4o")
    code, out = _run(tmp_path, "--router", router, "--model", "chat")
    assert code == 0 and "answered by chat -> openai/gpt-4o" in out, out
    _router(tmp_path / "router.yaml", "openai/gpt-4.1")
    code, out = _run(tmp_path, "--router", router, "--model", "chat")
    assert code == 1 and "deployment" in out and "resumed" not in out, out
    _router(tmp_path / "router.yaml", "openai/gpt-4o")
    config = tmp_path / "handoffmon.yaml"
    config.write_text(yaml.safe_dump({"attribution": {"canonical_models": {"openai/gpt-4o": "gpt4o"}}}))
    code, out = _run(tmp_path, "--router", router, "--model", "chat", "--config", str(config))
    assert code == 1 and "names" in out and "deployment" not in out.split("other settings")[1], out
    code, out = _run(
        tmp_path, "--router", router, "--model", "chat", "--config", str(config), "--discard-stale"
    )
    assert code == 0 and "answered by chat -> gpt4o" in out, out


def test_turns_stored_without_a_fingerprint_are_not_resumed(tmp_path: Path) -> None:
    """A database from before fingerprints: nothing says which seed wrote it, so it is refused."""
    sim = ["--router", "sim:3", "--model", "sim-00"]
    assert _run(tmp_path, *sim)[0] == 0
    with sqlite3.connect(tmp_path / "e.sqlite") as c:
        c.execute("DELETE FROM fingerprints")
    code, out = _run(tmp_path, *sim)
    assert code == 1 and "without a fingerprint" in out, out
