"""`handoffmon demo` as a user runs it: exit 0, summary, report files; --serve keeps /metrics live."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return resp.read().decode("utf-8")


def _turns_total(text: str) -> float:
    return sum(float(v) for v in re.findall(r"^handoffmon_turns_total\{[^}]*\} ([0-9.e+]+)$", text, re.M))


def test_small_demo_with_serve_exits_zero_writes_outputs_and_serves_live_metrics(tmp_path: Path) -> None:
    """A small seeded demo: summary beside the planted truth, three files, and a /metrics endpoint
    whose turn counter keeps growing with live traffic and which carries the refit gauges; exits 0
    after --duration."""
    port = free_port()
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    cmd = [
        sys.executable,
        "-m",
        "handoffmon",
        "demo",
        "--size",
        "0.05",
        "--seed",
        "3",
        "--no-progress",
        "--out-dir",
        str(tmp_path),
        "--serve",
        str(port),
        "--duration",
        "5",
        "--refit-interval",
        "1",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        samples: list[float] = []
        refit_seen = False
        deadline = time.monotonic() + 150
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                text = _scrape(url)
            except OSError:
                time.sleep(0.5)
                continue
            samples.append(_turns_total(text))
            refit_seen = refit_seen or "handoffmon_prefix_influence{" in text
            time.sleep(1.0)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert "Handoff effect Δ(A→B)" in out and "Prefix influence π" in out and "Recovery: Pearson(π)" in out
    assert "ember" in out and "[planted]" in out
    for name in ("handoffmon-report.html", "handoffmon-refit.json", "handoffmon-truth.json"):
        assert (tmp_path / name).stat().st_size > 1000
    assert refit_seen
    initial = int(re.search(r"([0-9,]+) turns through a litellm.Router", out).group(1).replace(",", ""))
    assert max(samples) > initial > 0  # live traffic kept flowing after the initial run, while served


def test_serve_on_a_busy_port_fails_with_a_clear_message(tmp_path: Path) -> None:
    """--serve on a port already in use exits 1 naming the port, without a traceback."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        cmd = [
            sys.executable,
            "-m",
            "handoffmon",
            "demo",
            "--serve",
            str(port),
            "--size",
            "0.01",
            "--no-progress",
            "--out-dir",
            str(tmp_path),
        ]
        res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 1
    assert f"--serve {port}: cannot listen on 127.0.0.1:{port}" in res.stderr
    assert "Traceback" not in res.stderr
