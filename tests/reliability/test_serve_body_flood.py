"""Large-body flood through `handoffmon serve`: clients send requests of megabytes (hundreds of
thousands of small messages, the costliest history to attribute) faster than the pipeline can
attribute them; serve's resident memory stays flat, the excess is shed from monitoring and
counted, and every request is answered.

Before ``pipeline.max_queued_bytes``, each queued turn held its raw body (and, once attributed,
a context of one entry per earlier message) until it was checked: the same flood grew serve by
~15 MiB a second, to gigabytes within minutes. `handoffmon serve` runs as a subprocess (its own
RSS) with its default configuration in front of the mock upstream. Slow: ~40 s.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tests.proxy.conftest import serve_process
from tests.proxy.mock_upstream import MockUpstream, ServerThread
from tests.reliability.test_serve_name_flood import _rss_mib, _sample

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.exclusive]

CLIENTS = 6
SECONDS = 30.0
MESSAGES = 200_000
"""~7 MiB a request: about 1 s of attribution each on the benchmark hosts, while the six clients
send several a second."""
FLAT_MIB = 64.0
"""Growth allowed from the middle third of the run to the last (medians of the RSS samples): the
budget (64 MiB of raw bodies) fills in the first. Unbounded, the flood grew serve ~15 MiB a
second (~150 MiB between those thirds); bounded, single samples still swing by 20-70 MiB as
parsed 200,000-message requests overlap, which is why it is not the maximum that is compared."""


def test_serve_memory_stays_flat_under_a_flood_of_large_bodies(tmp_path: Path) -> None:
    body = json.dumps(
        {
            "model": "model-a",
            "messages": [
                {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(MESSAGES)
            ],
        }
    ).encode()
    port = free_port()
    with ServerThread(MockUpstream(), free_port()) as upstream:
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        env.pop("HANDOFFMON_CONFIG", None)
        args = ["serve", "--upstream", upstream.url, "--port", str(port)]
        with serve_process(args, port, env, start_timeout_s=60) as served:
            stop = time.monotonic() + SECONDS
            statuses: list[int] = []

            def client() -> None:
                with httpx.Client(base_url=served.url, timeout=60) as http:
                    while time.monotonic() < stop:
                        r = http.post(
                            "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
                        )
                        statuses.append(r.status_code)

            threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
            for t in threads:
                t.start()
            rss: list[float] = []
            while any(t.is_alive() for t in threads):
                rss.append(_rss_mib(served.pid))
                time.sleep(1.0)
            for t in threads:
                t.join()
            with httpx.Client(base_url=served.url, timeout=120) as http:
                assert http.post("/admin/flush").status_code == 200
                metrics = http.get("/metrics").text
    assert statuses and set(statuses) == {200}, set(statuses)
    # flat: the last third's median against the middle third's (the first is the budget filling);
    # a single sample's spike (an arena the allocator has not returned yet) is not a trend
    third = len(rss) // 3
    assert statistics.median(rss[2 * third :]) - statistics.median(rss[third : 2 * third]) <= FLAT_MIB, rss
    dropped = _sample(metrics, "handoffmon_queue_dropped_total")
    monitored = sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("handoffmon_turns_total{")
    )
    assert dropped > 0 and monitored > 0
    assert dropped + monitored == len(statuses)  # every answered request monitored or counted as shed
