"""SIGTERM drains a runtime in a process that has no SIGTERM handler of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from handoffmon.pipeline.aggregates import load_counts_sqlite

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import sys, time
    from handoffmon.checkers import RuleSet, default_registry
    from handoffmon.config import RuleConfig, config_from_mapping
    from handoffmon.ingress import Outcome, RequestParser
    from handoffmon.runtime import build_runtime

    def slow(params):
        def check(reply, ctx):
            time.sleep(0.2)  # 10 turns = 2 s of checking still queued when SIGTERM arrives
            return True
        return check

    registry = default_registry()
    registry.register("slow", slow)
    rules = RuleSet.from_config([RuleConfig(name="slow", check="slow")], registry=registry, budget_s=5.0)
    cfg = config_from_mapping({
        "store": {"backend": "sqlite", "path": sys.argv[1]},
        "telemetry": {"log_turns": False},
        "refit": {"interval_s": 0},
    })
    rt = build_runtime(cfg, registry=None, rules=rules)
    parser = RequestParser()
    for i in range(10):
        cap = rt.monitor.capture(parser.parse([{"role": "user", "content": f"conversation {i}"}], "g"))
        rt.monitor.finish(cap, {"role": "assistant", "content": "ok"}, Outcome(authors=("a",)))
    print("queued", flush=True)
    time.sleep(60)
    """
)


def test_sigterm_drains_queued_turns_then_terminates(tmp_path: Path) -> None:
    """Ten turns still queued at SIGTERM are all counted in SQLite; the process still dies of SIGTERM."""
    db = tmp_path / "hm.db"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(db)], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "queued"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    counts = load_counts_sqlite(db)
    assert counts.total_turns == 10
    assert sum(n for k, n in counts.checks.items() if k.rule == "slow") == 10
