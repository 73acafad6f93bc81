"""Fixtures: a LiteLLM-like mock upstream on loopback, and in-process ``handoffmon serve`` apps."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from handoffmon.config import HandoffmonConfig, config_from_mapping
from handoffmon.proxy.app import create_app
from handoffmon.proxy.server import uvicorn_options
from tests.conftest import free_port
from tests.proxy.mock_upstream import MockUpstream, ServerThread
from tests.proxy.scripted_upstream import ScriptedUpstream


@dataclass
class Upstream:
    url: str
    mock: MockUpstream


@dataclass
class Proxy:
    url: str
    config: HandoffmonConfig = field(repr=False)
    monitor: Any = field(repr=False)
    registry: CollectorRegistry = field(repr=False)
    runtime: Any = field(default=None, repr=False)
    state: Any = field(default=None, repr=False)
    """The app's ``ProxyState`` (``running_proxy``)."""


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    """The mock upstream, shared by a test module."""
    mock = MockUpstream()
    with ServerThread(mock, free_port()) as srv:
        yield Upstream(srv.url, mock)


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[ScriptedUpstream, str]]:
    """The scripted upstream (``tests/proxy/scripted_upstream.py``) and its URL, per test module."""
    app = ScriptedUpstream()
    with ServerThread(app, free_port()) as srv:
        yield app, srv.url


def proxy_config(upstream_url: str, **sections: Any) -> HandoffmonConfig:
    """Config for a proxy in front of ``upstream_url``; ``proxy=…`` etc. merge into sections
    (a list section, ``rules=[…]``, is taken as given)."""
    data: dict[str, Any] = {"telemetry": {"log_turns": False}, "refit": {"interval_s": 0}}
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values} if isinstance(values, dict) else values
    data["proxy"] = {"upstream": upstream_url, **data.get("proxy", {})}
    return config_from_mapping(data)


@contextmanager
def running_proxy(config: HandoffmonConfig, **uvicorn_overrides: Any) -> Iterator[Proxy]:
    """``create_app(config)`` served by uvicorn (the serve options, then ``uvicorn_overrides``)
    on a free loopback port."""
    app = create_app(config)
    options = {**uvicorn_options(config, app.metrics), **uvicorn_overrides}
    with ServerThread(app, free_port(), **options) as srv:
        state = app.state.proxy
        yield Proxy(srv.url, config, state.monitor, state.runtime.registry, state.runtime, state)


@dataclass(frozen=True)
class ServeProcess:
    """A running ``handoffmon serve`` subprocess: its base URL and process id."""

    url: str
    pid: int


@contextmanager
def serve_process(
    args: list[str], port: int, env: dict[str, str], *, start_timeout_s: float = 30
) -> Iterator[ServeProcess]:
    """``python -m handoffmon <args>`` (a ``serve`` command listening on ``port``) in a subprocess;
    yields its URL and pid once ``/readyz`` answers, terminates it afterwards."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "handoffmon", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, f"handoffmon serve did not start in {start_timeout_s:g} s"
            time.sleep(0.1)
        yield ServeProcess(url, proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)
