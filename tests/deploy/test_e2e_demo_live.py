"""End to end (slow): a real Prometheus with the shipped rules scrapes `handoffmon demo --serve`.

The default suite runs the same checks on recorded demo traffic (``test_e2e_prometheus.py``);
this live run (65-140 s) is kept for ``pytest -m slow``.

The simulator's default fleet plants one risky prefix model (``ember``, π = −0.17); its
handoff pairs must fire ``HandoffPairRisky`` while pairs whose planted effect is near zero
stay quiet, and every PromQL query of the shipped dashboard must parse and return data. The
demo runs in wrap mode, so a real `handoffmon serve` in front of the mock upstream is scraped as
a second target of the same job: the serve-only panels and recording rule get data too.

The shipped rules are loaded unchanged except for ``for:`` durations, which are rewritten
to a few seconds in a temporary copy: waiting 15-30 minutes is impossible in CI. Windows,
thresholds and traffic gates are the shipped ones (with only minutes of data, ``rate(x[1h])``
divides the observed increase by an hour, so "≥ 20 turns in the last hour" means ≥ 20
turns since Prometheus started scraping).
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from handoffmon.sim.fleet import Fleet, default_fleet
from tests.conftest import free_port, port_open, require_binary
from tests.deploy.conftest import shortened_rules
from tests.deploy.shipped import (
    GRAFANA_ALERTS,
    ROUTING_ONLY,
    RULES,
    SHADOW_ONLY,
    TEMPLATE_VALUES,
    dashboard,
    load_yaml,
    panel_targets,
    substitute,
)
from tests.promserver import PromServer, prometheus_server
from tests.proxy.conftest import proxy_config, running_proxy
from tests.proxy.mock_upstream import MockUpstream, ServerThread

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow, pytest.mark.exclusive]

DEMO_ARGS = ["--size", "0.3", "--seed", "3", "--refit-interval", "2", "--no-progress"]
STARTUP_TIMEOUT_S = 90.0
ALERT_TIMEOUT_S = 120.0
SCRAPE_INTERVAL = "5s"
"""Scrape interval and timeout of the ``handoffmon`` job. The loaded demo's /metrics is ~8,000
series (~0.9 MB): on a 2-core host its scrapes took 0.3-1.0 s with the demo alone and up to
3.1 s with two CPU hogs beside it, so a 1 s timeout dropped one scrape in ten here and most of
them on a slower host (stale series, then "no data" and alerts that never fire). Production
scrapes every 15 s with a 10 s timeout (``deploy/prometheus/prometheus.yml``)."""
SCRAPE_GRACE_S = 20.0
RISKY_PREFIX = min(default_fleet().models, key=lambda m: m.influence).name
"""The model planted with the most harmful prefix influence (``ember`` in the demo fleet)."""
HEALTHY_MIN_PLANTED_DELTA = -0.03
"""Pairs whose planted Δ = μ + π_A + σ_B is at least this are healthy: they must never fire."""
SERVE_TURNS = 6
"""Chat completions sent through the `serve` target (a two-model conversation with a handoff)."""


@dataclass
class Stack:
    """The running demo and Prometheus."""

    prom: PromServer
    demo: subprocess.Popen[bytes]
    demo_log: Path

    def demo_tail(self, n: int = 30) -> str:
        return "\n".join(self.demo_log.read_text(errors="replace").splitlines()[-n:])


def _start_demo(port: int, out_dir: Path) -> subprocess.Popen[bytes]:
    """`handoffmon demo --serve PORT` writing its report and log into ``out_dir``."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    cmd = [
        sys.executable,
        "-m",
        "handoffmon",
        "demo",
        "--serve",
        str(port),
        "--out-dir",
        str(out_dir),
        *DEMO_ARGS,
    ]
    with (out_dir / "demo.log").open("wb") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=out_dir)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def _converse_through(proxy_url: str) -> None:
    """One conversation of ``SERVE_TURNS`` chat completions through `serve` (the mock
    upstream alternates authors, so the proxy records handoffs)."""
    messages: list[dict[str, str]] = [{"role": "system", "content": "Answer in English."}]
    with httpx.Client(base_url=proxy_url, timeout=10.0) as client:
        for turn in range(SERVE_TURNS):
            messages.append({"role": "user", "content": f"Question {turn}?"})
            r = client.post("/v1/chat/completions", json={"model": "model-a", "messages": messages})
            assert r.status_code == 200, r.text
            messages.append({"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]})


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Demo serving /metrics with live traffic, Prometheus scraping it (every ``SCRAPE_INTERVAL``)
    and evaluating the rules every second."""
    require_binary("prometheus")
    tmp = tmp_path_factory.mktemp("e2e")
    port = free_port()
    demo_log = tmp / "demo.log"
    demo = _start_demo(port, tmp)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not port_open("127.0.0.1", port):
            assert demo.poll() is None, f"demo exited early:\n{demo_log.read_text(errors='replace')}"
            assert time.monotonic() < deadline, "demo never opened its /metrics port"
            time.sleep(0.2)
        rules = shortened_rules(tmp / "handoffmon-rules.yml")
        with (
            ServerThread(MockUpstream(), free_port()) as upstream,
            running_proxy(proxy_config(upstream.url)) as proxy,
        ):
            _converse_through(proxy.url)
            targets = [f"127.0.0.1:{port}", proxy.url.removeprefix("http://")]
            job = {
                "job_name": "handoffmon",
                "scrape_interval": SCRAPE_INTERVAL,
                "scrape_timeout": SCRAPE_INTERVAL,
                "static_configs": [{"targets": targets}],
            }
            with prometheus_server(tmp, targets, [rules], scrape_configs=[job]) as prom:
                yield Stack(prom=prom, demo=demo, demo_log=demo_log)
    finally:
        _stop(demo)


@pytest.fixture(scope="module")
def refit_scraped(stack: Stack) -> Stack:
    """Wait until the demo's refit gauges and a minute-scale stretch of live traffic are in Prometheus."""
    prom = stack.prom

    def ready() -> bool:
        assert stack.demo.poll() is None, f"demo exited:\n{stack.demo_tail()}"
        return bool(prom.query("handoffmon_handoff_risk")) and bool(
            prom.query("sum(increase(handoffmon_turns_total[1h])) > 200")
        )

    assert prom.wait_for(ready, STARTUP_TIMEOUT_S), (
        f"no refit/traffic in Prometheus\n{prom.target_health()}\n{stack.demo_tail()}"
    )
    return stack


def _active(prom: PromServer, alertname: str, state: str | None = None) -> list[dict[str, Any]]:
    return [
        a
        for a in prom.alerts()
        if a["labels"].get("alertname") == alertname and (state is None or a["state"] == state)
    ]


def test_planted_risky_pair_fires_and_healthy_pairs_stay_quiet(refit_scraped: Stack) -> None:
    """HandoffPairRisky reaches `firing` for a pair led by the planted risky model; every
    firing pair has a planted Δ below −0.05, and no pair whose planted Δ is ≥ −0.03 is ever
    pending or firing while we watch."""
    prom = refit_scraped.prom
    fleet = default_fleet()
    planted = {(a, b): fleet.handoff_shift(a, b) for a in fleet.names for b in fleet.names if a != b}
    healthy = {pair for pair, delta in planted.items() if delta >= HEALTHY_MIN_PLANTED_DELTA}
    assert len(healthy) >= 5, "the default fleet should have healthy pairs"
    seen: list[dict[str, Any]] = []

    def risky_firing() -> bool:
        alerts = _active(prom, "HandoffPairRisky")
        seen.extend(alerts)
        return any(a["labels"]["prefix_model"] == RISKY_PREFIX and a["state"] == "firing" for a in alerts)

    fired = prom.wait_for(risky_firing, ALERT_TIMEOUT_S, interval_s=1.0)
    active = sorted({(a["labels"]["prefix_model"], a["labels"]["model"], a["state"]) for a in seen})
    assert fired, (
        f"no HandoffPairRisky firing for {RISKY_PREFIX}->*; active: {active}\n{prom.target_health()}\n"
        f"{refit_scraped.demo_tail()}"
    )
    for _ in range(5):  # a few more evaluations with fresh refits
        time.sleep(1.0)
        risky_firing()
    noisy = sorted(
        {
            (
                a["labels"]["prefix_model"],
                a["labels"]["model"],
                a["labels"]["rule"],
                a["labels"]["signal"],
                a["state"],
                round(float(a["value"]), 3),
            )
            for a in seen
            if (a["labels"]["prefix_model"], a["labels"]["model"]) in healthy
        }
    )
    assert not noisy, f"healthy pairs alerted: {noisy}"
    for alert in (a for a in seen if a["state"] == "firing"):
        a, b = alert["labels"]["prefix_model"], alert["labels"]["model"]
        assert planted[(a, b)] < -0.05, (a, b, planted[(a, b)], alert["labels"])
        assert f"{a} → {b}" in alert["annotations"]["summary"]
        assert alert["annotations"]["runbook_url"].endswith("#handoffpairrisky")


def _planted_into(fleet: Fleet, model: str) -> float:
    """Planted Δ of handoffs into ``model``, averaged over the other models as prefixes (the
    refit weights prefixes by their observed handoffs; the fleet's routing is close to even)."""
    shifts = [fleet.handoff_shift(a, model) for a in fleet.names if a != model]
    return sum(shifts) / len(shifts)


def test_model_hurt_by_handoffs_fires_and_models_helped_stay_quiet(refit_scraped: Stack) -> None:
    """HandoffsIntoModelHurt fires (pooled rule `all`) for the model whose planted Δ into it is
    most negative, and never for a model whose planted Δ into it is ≥ 0 (absolute Δ, not σ)."""
    prom = refit_scraped.prom
    fleet = default_fleet()
    into = {m: _planted_into(fleet, m) for m in fleet.names}
    target = min(into, key=into.__getitem__)
    assert into[target] < -0.05
    helped = {m for m, d in into.items() if d >= 0}
    assert helped, into
    seen: list[dict[str, Any]] = []

    def target_firing() -> bool:
        alerts = _active(prom, "HandoffsIntoModelHurt")
        seen.extend(alerts)
        return any(
            a["labels"]["model"] == target and a["labels"]["rule"] == "all" and a["state"] == "firing"
            for a in alerts
        )

    assert prom.wait_for(target_firing, ALERT_TIMEOUT_S, interval_s=1.0), (
        sorted({(a["labels"]["model"], a["labels"]["rule"], a["state"]) for a in seen}),
        prom.target_health(),
    )
    noisy = sorted({a["labels"]["model"] for a in seen} & helped)
    assert not noisy, f"models planted with Δ into them ≥ 0 alerted: {noisy} ({into})"


def test_every_rule_evaluates_without_error_and_recording_rules_have_data(refit_scraped: Stack) -> None:
    """All shipped rules are healthy on real series, and each recording rule yields samples."""
    prom = refit_scraped.prom
    assert prom.wait_for(lambda: all(h == "ok" for _, h, _ in prom.rule_health()), 15.0), prom.rule_health()
    records = [r["record"] for g in load_yaml(RULES)["groups"] for r in g["rules"] if "record" in r]
    empty = [name for name in records if not prom.query(name)]
    assert not empty, f"recording rules without data: {empty}"


def _has_data(prom: PromServer, query: str) -> bool:
    return bool(prom.query(query))


def test_every_dashboard_query_parses_and_returns_data(refit_scraped: Stack) -> None:
    """Each panel target, with template variables at their defaults, parses in Prometheus
    and returns at least one sample."""
    prom = refit_scraped.prom
    targets = panel_targets(dashboard())
    assert len(targets) >= 15
    empty: list[str] = []
    for title, expr in targets:
        query = substitute(expr, {**TEMPLATE_VALUES, "job": "handoffmon"})
        prom.query(query)  # raises with Prometheus' parse error
        # A scrape that times out on the loaded demo marks its gauges stale for a second:
        # "returns data" means within a few scrapes.
        if any(s in expr for s in (*ROUTING_ONLY, *SHADOW_ONLY)):
            continue  # off in the demo; test_e2e_routing / test_e2e_shadow check them with data
        if not prom.wait_for(functools.partial(_has_data, prom, query), SCRAPE_GRACE_S):
            empty.append(f"{title}: {expr}")
    assert not empty, "queries without data:\n" + "\n".join(empty) + "\n" + prom.target_health()


def test_dashboard_variables_resolve_to_label_values(refit_scraped: Stack) -> None:
    """The rule, model and fit_rule variables' label_values queries return values, and the
    fit_rule default (`all`) is among them."""
    prom = refit_scraped.prom
    for var in dashboard()["templating"]["list"]:
        if var["type"] != "query":
            continue
        m = re.fullmatch(r"label_values\((.+), (\w+)\)", var["query"])
        assert m, var["query"]
        match = substitute(m.group(1), {**TEMPLATE_VALUES, "job": "handoffmon"})
        values = prom.api(f"label/{m.group(2)}/values", {"match[]": match})
        if var["name"] in ("namespace", "cluster"):
            continue  # a plain Prometheus target has neither label
        assert values, var["name"]
        if var["name"] == "fit_rule":
            assert var["current"]["value"] in values


def test_grafana_alert_queries_run_and_select_the_risky_pair(refit_scraped: Stack) -> None:
    """Every Grafana-managed rule's query A runs on the real Prometheus, and the
    HandoffPairRisky one returns a series for the planted risky prefix model (what Grafana's
    `is_number(last(A))` condition turns into a firing instance)."""
    prom = refit_scraped.prom
    rules = load_yaml(GRAFANA_ALERTS)["groups"][0]["rules"]
    queries = {r["title"]: next(d for d in r["data"] if d["refId"] == "A")["model"]["expr"] for r in rules}
    for expr in queries.values():
        prom.query(expr)  # raises on a parse or evaluation error

    def risky_selected() -> bool:
        return any(
            s["metric"]["prefix_model"] == RISKY_PREFIX for s in prom.query(queries["HandoffPairRisky"])
        )

    assert prom.wait_for(risky_selected, ALERT_TIMEOUT_S), prom.target_health()
