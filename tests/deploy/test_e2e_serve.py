"""The ``handoffmon serve`` panels, its recording rule and ProxyUpstreamErrors on a real Prometheus
scraping two real ``serve`` apps.

The recorded demo traffic of ``test_e2e_prometheus`` has no proxy, so there the proxy panels and
``handoffmon:proxy_upstream_errors:ratio_rate5m`` only parse. Here ``staging`` is a ``serve`` in
front of the mock upstream (conversations with handoffs) and ``prod`` one whose upstream refuses
connections (every request a 502, ``kind="connect"``).
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tests.conftest import free_port
from tests.deploy.shipped import RULES, TEMPLATE_VALUES, alert_rules, dashboard, panel_targets, substitute
from tests.promserver import PromServer, prometheus_server
from tests.proxy.conftest import proxy_config, running_proxy
from tests.proxy.mock_upstream import MockUpstream, ServerThread

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]  # 6-9 s each: the slow phase

VALUES = {**TEMPLATE_VALUES, "__rate_interval": "10s"}
RATIO = "handoffmon:proxy_upstream_errors:ratio_rate5m"


def _proxy_targets() -> dict[str, str]:
    out = {f"{t} [{i}]": e for i, (t, e) in enumerate(panel_targets(dashboard())) if "handoffmon_proxy_" in e}
    assert len(out) >= 6, out
    return out


def _by_job(prom: PromServer, expr: str) -> dict[str, float]:
    return {s["metric"].get("job", ""): float(s["value"][1]) for s in prom.query(expr)}


def test_serve_panels_ratio_and_upstream_alert_on_real_serve_series(tmp_path: Path) -> None:
    """Every proxy panel query returns data for the serving deployment; upstream errors by kind
    for the broken one; the error ratio is 1 for prod and 0 for staging, and ProxyUpstreamErrors'
    expression selects prod alone."""
    rules = [{"name": "no_commas", "check": "no_commas"}]
    with (
        ServerThread(MockUpstream(), free_port()) as upstream,
        running_proxy(proxy_config(upstream.url, rules=rules)) as healthy,
        running_proxy(proxy_config(f"http://127.0.0.1:{free_port()}", rules=rules)) as broken,
    ):
        scrape = [
            {"job_name": job, "static_configs": [{"targets": [url.removeprefix("http://")]}]}
            for job, url in (("staging", healthy.url), ("prod", broken.url))
        ]
        with prometheus_server(tmp_path, [], [RULES], scrape_configs=scrape) as prom, httpx.Client() as http:
            assert prom.wait_for(lambda: len(_by_job(prom, "up == 1")) == 2, 30), prom.log_tail()
            (alert,) = [a for a in alert_rules() if a["alert"] == "ProxyUpstreamErrors"]
            targets = _proxy_targets()
            errors = next(e for t, e in targets.items() if "upstream_errors" in e)
            i = 0

            def traffic() -> None:
                nonlocal i
                messages: list[dict[str, str]] = []
                for d in range(3):
                    messages.append({"role": "user", "content": f"question {d} of c{i}"})
                    body = {"model": "group", "messages": messages}
                    reply = http.post(f"{healthy.url}/v1/chat/completions", json=body, timeout=10)
                    assert reply.status_code == 200, reply.text
                    messages.append(
                        {"role": "assistant", "content": reply.json()["choices"][0]["message"]["content"]}
                    )
                    assert (
                        http.post(f"{broken.url}/v1/chat/completions", json=body, timeout=10).status_code
                        == 502
                    )
                i += 1

            def ready() -> bool:
                traffic()
                return (
                    all(prom.query(substitute(e, {**VALUES, "job": "staging"})) for e in targets.values())
                    and _by_job(prom, RATIO) == {"prod": 1.0, "staging": 0.0}
                    and set(_by_job(prom, alert["expr"])) == {"prod"}
                )

            assert prom.wait_for(ready, 60), (_by_job(prom, RATIO), _by_job(prom, alert["expr"]))
            kinds = {
                s["metric"]["kind"]
                for s in prom.query(substitute(errors, VALUES))
                if float(s["value"][1]) > 0
            }
            assert kinds == {"connect"}
            assert not [
                s
                for s in prom.query(substitute(errors, {**VALUES, "job": "staging"}))
                if float(s["value"][1])
            ]
