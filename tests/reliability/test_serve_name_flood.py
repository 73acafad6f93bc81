"""Name flood through `handoffmon serve`: every request brings a new served model, rule and
conversation; the serve process's resident memory plateaus once its caps are full.

`handoffmon serve` runs as a subprocess (its own RSS, read from /proc) in front of the mock
upstream, with the small caps of ``tests/reliability/name_flood.py`` (500 conversations, 500
pending replies, 1 MB of text) so every bounded structure fills within the first half (a
refit every second imports scipy early). Slow: 5,000 requests take 30-60 s here.
Request ``i`` is answered by model ``model-i`` (the upstream's authorship header), declares
rule ``rule-i`` in ``metadata.handoffmon.rules`` and continues conversation ``conv-i``. The
second half of the run must not grow by more than the soak's tolerance, and /metrics must
show the model and rule caps reached, the overflow counted and every request answered.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conftest import free_port
from tests.proxy.conftest import serve_process
from tests.proxy.mock_upstream import MockUpstream, ServerThread
from tests.reliability.name_flood import SMALL

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.exclusive]

REQUESTS = 5_000
FLAT_MIB = 8.0
"""Growth allowed over the second half of a run whose caps are all reached in the first (as
``test_name_flood``)."""
MIB = 2**20


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MIB


def _sample(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = rf"^{name}{{{want}}} (\S+)$" if want else rf"^{name} (\S+)$"
    m = re.search(pattern, text, flags=re.M)
    assert m, f"{name}{{{want}}} not in /metrics"
    return float(m.group(1))


def test_serve_memory_plateaus_under_a_name_flood(tmp_path: Path) -> None:
    cfg = tmp_path / "handoffmon.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {**SMALL, "refit": {"interval_s": 1}, "telemetry": {"log_turns": False}},
        )
    )
    port = free_port()
    with ServerThread(MockUpstream(), free_port()) as upstream:
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HANDOFFMON_CONFIG": str(cfg)}
        args = ["serve", "--upstream", upstream.url, "--port", str(port)]
        with (
            serve_process(args, port, env, start_timeout_s=60) as served,
            httpx.Client(base_url=served.url, timeout=30) as client,
        ):
            rss: list[float] = []
            for i in range(REQUESTS):
                r = client.post(
                    "/v1/chat/completions",
                    headers={"x-mock-model": f"model-{i}", "x-conversation-id": f"conv-{i}"},
                    json={
                        "model": f"group-{i}",
                        "messages": [
                            {"role": "user", "content": f"conv-{i} first"},
                            {"role": "assistant", "content": f"earlier answer of conv-{i}"},
                            {"role": "user", "content": "and then?"},
                        ],
                        "metadata": {"handoffmon": {"rules": [{"name": f"rule-{i}", "check": "no_commas"}]}},
                    },
                )
                assert r.status_code == 200, r.text[:300]
                if (i + 1) % (REQUESTS // 10) == 0:
                    assert client.post("/admin/flush").status_code == 200
                    rss.append(_rss_mib(served.pid))
            metrics = client.get("/metrics").text
    assert rss[-1] - rss[4] <= FLAT_MIB, rss
    assert _sample(metrics, "handoffmon_label_values", label="model") == _sample(
        metrics, "handoffmon_label_limit", label="model"
    )
    assert _sample(metrics, "handoffmon_label_overflows_total", label="model") > 0
    assert _sample(metrics, "handoffmon_label_overflows_total", label="rule") > 0
    answered = _sample(
        metrics, "handoffmon_proxy_requests_total", route="chat_completions", status_class="2xx"
    )
    assert answered == REQUESTS
