"""wrap(litellm.Router) with nothing but config: series in the default registry and on metrics_port; a Redis
outage mid-traffic shows up on /metrics and changes nothing for the application."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

from handoffmon.integrations import wrap
from tests.integrations.routers import ALPHA_REPLY, BACKUP_REPLY, CANONICAL, fallback_router
from tests.stores.redis_server import RedisServer

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

RULE = '[{"name": "brief", "check": "length", "params": {"unit": "words", "max": 5}}]'


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """Configuration through HANDOFFMON_* only; the shared runtime it builds is closed afterwards."""
    monkeypatch.delenv("HANDOFFMON_CONFIG", raising=False)
    monkeypatch.setenv("HANDOFFMON_TELEMETRY__METRICS_PORT", "0")  # any free port
    monkeypatch.setenv("HANDOFFMON_TELEMETRY__LOG_TURNS", "false")
    monkeypatch.setenv("HANDOFFMON_ATTRIBUTION__CANONICAL_MODELS", _json(CANONICAL))
    monkeypatch.setenv("HANDOFFMON_RULES", RULE)
    yield monkeypatch
    from handoffmon.runtime import shared_runtime

    shared_runtime().close()  # the same config: the runtime wrap() built


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


def _converse(client: Any, turns: int, tag: str) -> list[str]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"hello {tag}"}]
    replies = []
    for i in range(turns):
        group = "primary" if i % 2 else "alpha"
        text = str(client.completion(model=group, messages=messages).choices[0].message.content)
        replies.append(text)
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"more {i}"}]
    return replies


def test_wrap_with_config_only_shows_series_on_the_port_and_in_the_default_registry(
    env: pytest.MonkeyPatch,
) -> None:
    """A real Router wrapped with no code but config: prometheus_client's REGISTRY (what an app's
    /metrics serves) and telemetry.metrics_port both show the turns; the refit is scheduled."""
    wrapped = wrap(fallback_router())
    rt = wrapped.runtime
    assert rt is not None and rt.refit is not None and rt.refit.running
    assert _converse(wrapped, 4, "registry") == [ALPHA_REPLY, BACKUP_REPLY] * 2
    assert rt.flush(10)
    labels = {"model": "model-b", "prefix_model": "model-c", "depth_bucket": "2"}
    assert REGISTRY.get_sample_value("handoffmon_turns_total", labels) == 1.0
    assert rt.metrics_server is not None and rt.metrics_server.addr == "127.0.0.1"
    text = httpx.get(rt.metrics_server.url, timeout=5).text
    assert 'handoffmon_turns_total{depth_bucket="2",model="model-b",prefix_model="model-c"} 1.0' in text
    assert 'rule="brief"' in text
    second = wrap(fallback_router())  # a second wrapper shares the runtime: no duplicate registration
    assert second.runtime is rt


@pytest.mark.integration
def test_redis_outage_mid_traffic_is_on_metrics_and_invisible_to_the_application(
    env: pytest.MonkeyPatch,
) -> None:
    """A private redis-server stopped between turns: every call still returns the router's reply, every
    turn is counted, and /metrics shows the store failures (by op and kind) and monitor_errors{store}."""
    with RedisServer() as redis:
        env.setenv("HANDOFFMON_STORE__BACKEND", "redis")
        env.setenv("HANDOFFMON_STORE__URL", redis.url)
        env.setenv("HANDOFFMON_STORE__KEY_PREFIX", f"hm-outage-{uuid.uuid4().hex}:")
        env.setenv("HANDOFFMON_STORE__TIMEOUT_S", "0.2")
        wrapped = wrap(fallback_router())
        rt = wrapped.runtime
        assert rt is not None
        before = _converse(wrapped, 4, "before")
        assert rt.flush(10)
        redis.stop()
        during = _converse(wrapped, 4, "during")
        assert rt.flush(10)
    assert before == during == [ALPHA_REPLY, BACKUP_REPLY] * 2  # traffic unchanged
    assert rt.metrics_server is not None
    text = httpx.get(rt.metrics_server.url, timeout=5).text
    failures = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line.startswith("handoffmon_store_failures_total{") and not line.endswith(" 0.0")
    }
    assert failures, text
    assert any('op="get"' in k or 'op="put"' in k for k in failures)
    errors = [
        ln for ln in text.splitlines() if ln.startswith('handoffmon_monitor_errors_total{stage="store"}')
    ]
    assert errors and float(errors[0].split(" ")[1]) >= 1
    assert rt.monitor.snapshot().total_turns == 8 and rt.monitor.snapshot().dropped == 0
