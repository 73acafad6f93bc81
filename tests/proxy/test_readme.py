"""The README's proxy section: its Python example runs against a live proxy; its series list is complete."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from handoffmon.exporters.store_failures import StoreStatsCollector
from handoffmon.proxy.metrics import ProxyMetrics
from tests.proxy.conftest import Upstream, proxy_config, running_proxy
from tests.proxy.mock_upstream import reply_text, schedule

README = Path(__file__).resolve().parents[2] / "README.md"


def section() -> str:
    text = README.read_text(encoding="utf-8")
    return text[text.index("<!-- section:proxy -->") : text.index("<!-- /section:proxy -->")]


def test_python_example_runs_against_serve(upstream: Upstream) -> None:
    """The SDK snippet, pointed at a running proxy, prints the upstream's reply and records a turn."""
    (code,) = re.findall(r"```python\n(.*?)```", section(), flags=re.S)
    with running_proxy(proxy_config(upstream.url)) as p:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code.replace("http://127.0.0.1:4100", p.url), "README.md", "exec"), {})
        assert out.getvalue() == reply_text(schedule(1), 1) + "\n"
        assert p.monitor.flush(10)
        assert p.monitor.snapshot().total_turns == 1


def test_every_proxy_series_is_documented() -> None:
    """Each family the proxy registers (and the store-failure collector) is named in the section."""
    registry = CollectorRegistry()
    ProxyMetrics(registry)
    registry.register(StoreStatsCollector(lambda: {"get_errors": 0}))
    exposed = {f"{fam.name}_total" if fam.type == "counter" else fam.name for fam in registry.collect()}
    documented = set(re.findall(r"`(handoffmon_(?:proxy|store)_[a-z_]+)(?:\{[^}]*\})?`", section()))
    assert exposed == documented
