"""The README's `handoffmon serve` quickstart runs against a live proxy, and /metrics counts the turn."""

from __future__ import annotations

import contextlib
import io

import httpx

from tests.docs.snippets import claimed
from tests.proxy.conftest import Upstream, proxy_config, running_proxy
from tests.proxy.mock_upstream import reply_text, schedule

PAGE = "README.md"


def test_serve_quickstart_reply_and_metrics(upstream: Upstream) -> None:
    """The snippet, pointed at a running proxy, prints the upstream's reply; /metrics then counts the turn."""
    (block,) = claimed(PAGE, "tests/proxy/test_readme.py")
    with running_proxy(proxy_config(upstream.url)) as p:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block.code.replace("http://127.0.0.1:4100", p.url), block.id, "exec"), {})
        assert out.getvalue() == reply_text(schedule(1), 1) + "\n"
        assert p.monitor.flush(10)
        metrics = httpx.get(f"{p.url}/metrics", timeout=10).text
    turns = [line for line in metrics.splitlines() if line.startswith("handoffmon_turns_total{")]
    assert len(turns) == 1
    assert 'depth_bucket="1"' in turns[0] and 'prefix_model="none"' in turns[0] and turns[0].endswith(" 1.0")
