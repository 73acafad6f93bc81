"""Serving /metrics: standalone server, token auth, WSGI and ASGI mounts, multiprocess (gunicorn) mode."""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from wsgiref.util import setup_testing_defaults

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.routing import Mount

from handoffmon.exporters.prometheus import PrometheusExporter
from handoffmon.exporters.serving import (
    metrics_asgi_app,
    metrics_wsgi_app,
    multiprocess_registry,
    start_metrics_server,
)
from handoffmon.sources.multiprocess import multiprocess_counts
from tests.exporters.turns import LF, L, counted, make_result, only, parse_exposition
from tests.exporters.workers import worker_said

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def exporter() -> PrometheusExporter:
    exp = PrometheusExporter(CollectorRegistry(), multiprocess=False)
    exp.export(make_result(author="gpt", checks=[("json", "pass")]))
    return exp


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_standalone_server_with_token(exporter: PrometheusExporter) -> None:
    """With a token: 401 without/with a wrong bearer, 200 with the right one; other paths 404."""
    with start_metrics_server(exporter.registry, 0, token="s3cret") as server:
        assert get(server.url)[0] == 401
        assert get(server.url, {"Authorization": "Bearer nope"})[0] == 401
        status, body = get(server.url, {"Authorization": "Bearer s3cret"})
        assert status == 200
        assert only(parse_exposition(body), "handoffmon_turns_total") == {
            L(model="gpt", prefix_model="none", depth_bucket="1"): 1
        }
        assert get(server.url.replace("/metrics", "/other"), {"Authorization": "Bearer s3cret"})[0] == 404


def test_standalone_server_without_token_is_open(exporter: PrometheusExporter) -> None:
    """Without a token anyone on the listen address can scrape (loopback by default)."""
    with start_metrics_server(exporter.registry, 0) as server:
        assert server.url.startswith("http://127.0.0.1:")
        assert get(server.url)[0] == 200


def test_wsgi_app_negotiates_openmetrics_and_gzip(exporter: PrometheusExporter) -> None:
    """The WSGI app answers OpenMetrics when asked, gzips when accepted, and filters by name[]."""
    app = metrics_wsgi_app(exporter.registry)
    captured: dict[str, object] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        captured["status"], captured["headers"] = status, dict(headers)

    environ: dict = {}
    setup_testing_defaults(environ)
    environ.update(
        HTTP_ACCEPT="application/openmetrics-text; version=1.0.0",
        HTTP_ACCEPT_ENCODING="gzip",
        QUERY_STRING="name[]=handoffmon_turns_total",
    )
    body = gzip.decompress(b"".join(app(environ, start_response)))
    headers = captured["headers"]
    assert captured["status"] == "200 OK"
    assert headers["Content-Type"].startswith("application/openmetrics-text")  # type: ignore[index]
    assert headers["Content-Encoding"] == "gzip"  # type: ignore[index]
    text = body.decode()
    assert text.endswith("# EOF\n")
    assert "handoffmon_turns_total" in text and "handoffmon_checks_total" not in text


async def test_asgi_app_mounted_in_starlette_with_token(exporter: PrometheusExporter) -> None:
    """Mounted at /metrics in a Starlette app, the ASGI app enforces the token and serves the registry."""
    app = Starlette(routes=[Mount("/metrics", app=metrics_asgi_app(exporter.registry, token="t0k"))])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        assert (await client.get("/metrics/")).status_code == 401
        resp = await client.get("/metrics/", headers={"Authorization": "Bearer t0k"})
        assert resp.status_code == 200
        assert counted(parse_exposition(resp.text), "handoffmon_checks_total") == {
            L(rule="json", model="gpt", prefix_model="none", depth_bucket="1", verdict="pass"): 1
        }
        assert (await client.post("/metrics/", headers={"Authorization": "Bearer t0k"})).status_code == 405


def run_worker(mp_dir: Path, *args: str) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(mp_dir), "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "tests.exporters.mp_worker", *args], env=env, cwd=ROOT, check=True)


def test_multiprocess_without_a_refit_serves_no_success_timestamp(tmp_path: Path) -> None:
    """Under PROMETHEUS_MULTIPROC_DIR a process that never refitted writes no success timestamp
    to the files (not a 0 that the collector would serve); one that refits adds it."""
    run_worker(tmp_path, "gpt", "3", "none")
    s = parse_exposition(get_multiprocess(tmp_path))
    assert only(s, "handoffmon_turns_total")
    assert only(s, "handoffmon_refit_last_success_timestamp_seconds") == {}
    run_worker(tmp_path, "claude", "1", "1800000100")
    s = parse_exposition(get_multiprocess(tmp_path))
    assert only(s, "handoffmon_refit_last_success_timestamp_seconds") == {LF(): 1800000100.0}


def get_multiprocess(mp_dir: Path) -> str:
    """The exposition the multiprocess collector serves for ``mp_dir``."""
    from prometheus_client import generate_latest

    return generate_latest(multiprocess_registry(str(mp_dir))).decode()


def test_multiprocess_two_writers_summed_by_one_collector(tmp_path: Path) -> None:
    """Two processes in one PROMETHEUS_MULTIPROC_DIR: counters and histograms sum, refit gauges take
    the most recent publisher, and (the documented limit) a vanished refit series reads NaN, not absent."""
    run_worker(tmp_path, "gpt", "3", "1800000100")
    run_worker(tmp_path, "claude", "4", "1800000500", "drop-claude-pair")
    registry = multiprocess_registry(str(tmp_path))
    with start_metrics_server(registry, 0) as server:
        status, body = get(server.url)
    assert status == 200
    s = parse_exposition(body)
    assert only(s, "handoffmon_turns_total") == {
        L(model="gpt", prefix_model="none", depth_bucket="1"): 3,
        L(model="claude", prefix_model="none", depth_bucket="1"): 4,
    }
    checks = counted(s, "handoffmon_checks_total")
    assert checks[L(rule="json", model="gpt", prefix_model="none", depth_bucket="1", verdict="fail")] == 2
    assert checks[L(rule="json", model="claude", prefix_model="none", depth_bucket="1", verdict="pass")] == 2
    assert counted(s, "handoffmon_monitor_errors_total") == {L(stage="check"): 2}
    assert only(s, "handoffmon_overhead_seconds_count") == {L(stage="attribution"): 2}
    # mostrecent: the second process published last
    assert only(s, "handoffmon_refit_last_success_timestamp_seconds") == {LF(): 1800000501.0}
    # limit: removal is impossible in multiprocess mode, so the vanished pair reads NaN
    delta = only(s, "handoffmon_handoff_delta")
    assert math.isnan(delta[LF(prefix_model="claude", model="gpt", rule="json", bound="estimate")])
    assert delta[LF(prefix_model="gpt", model="claude", rule="json", bound="estimate")] == -0.12
    # no pid label leaks into max-mode gauges
    assert only(s, "handoffmon_label_limit")[L(label="model")] == 50


def test_multiprocess_counts_sum_every_worker_of_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``multiprocess_counts``: the refit's counts of a whole multiprocess deployment (two workers
    here, one of them exited), not one worker's. A LiteLLM Proxy with ``--num_workers 2`` refitted
    each worker's own turns: its ``handoffmon_handoff_checked_turns`` read 67 of the 120 turns
    ``handoffmon_turns_total`` counted for the pair."""
    from handoffmon.counts import CheckKey, TurnKey
    from handoffmon.sources import SourceError

    run_worker(tmp_path, "gpt", "3", "none")
    run_worker(tmp_path, "claude", "4", "1800000100")
    counts = multiprocess_counts(str(tmp_path))
    assert counts.turns == {
        TurnKey("gpt", "none", "1", "false"): 3,
        TurnKey("claude", "none", "1", "false"): 4,
    }
    assert counts.checks == {
        CheckKey("json", "gpt", "none", "1", "fail"): 2,
        CheckKey("json", "gpt", "none", "1", "pass"): 1,
        CheckKey("json", "claude", "none", "1", "fail"): 2,
        CheckKey("json", "claude", "none", "1", "pass"): 2,
    }
    assert counts.monitor_errors == {"check": 2}
    run_worker(tmp_path, "gpt", "1", "none")  # a third process: its turn is added, nothing twice
    assert multiprocess_counts(str(tmp_path)).turns[TurnKey("gpt", "none", "1", "false")] == 4
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    with pytest.raises(SourceError, match="PROMETHEUS_MULTIPROC_DIR"):
        multiprocess_counts()


def test_multiprocess_serves_the_store_counters_of_every_worker(tmp_path: Path) -> None:
    """Under PROMETHEUS_MULTIPROC_DIR (a LiteLLM Proxy with several workers) the store's
    operations, failures and evictions reach the multiprocess ``/metrics``, summed over workers;
    they were read only by a scrape-time collector on each worker's registry, which that
    ``/metrics`` never serves."""
    counted_by = [json.loads(worker_said(tmp_path, "mp_store_worker", n)) for n in ("5", "4")]
    s = parse_exposition(get_multiprocess(tmp_path))
    evicted = only(s, "handoffmon_store_evictions_total")
    want = {what: sum(c["evictions"][what] for c in counted_by) for what in counted_by[0]["evictions"]}
    assert want["conversations"] > 0
    assert evicted == {L(what=what): n for what, n in want.items()}
    failures = only(s, "handoffmon_store_failures_total")
    assert len(failures) == len(counted_by[0]["stats"]) > 0
    for name in counted_by[0]["stats"]:
        op, _, kind = name.rpartition("_")
        assert failures[L(op=op, kind=kind)] == sum(c["stats"][name] for c in counted_by)
    operations = only(s, "handoffmon_store_operations_total")
    want = {op: sum(c["operations"][op] for c in counted_by) for op in counted_by[0]["operations"]}
    assert want["get"] > 0 and want["put_state"] > 0
    assert operations == {L(op=op): n for op, n in want.items()}


def test_a_dead_workers_build_info_and_label_caps_go_with_it(tmp_path: Path) -> None:
    """``handoffmon_build_info``, ``handoffmon_label_limit`` and ``handoffmon_label_values`` are
    the live workers' (``livemax``): once a worker is marked dead (gunicorn's ``child_exit``,
    LiteLLM's replacement worker at start) the version and cap it ran with are gone. As ``max``
    gauges a rolling upgrade kept the old version, and a lowered cap its old value, until the
    directory was wiped."""
    from handoffmon._version import __version__
    from handoffmon.exporters.serving import mark_process_dead

    old = int(worker_said(tmp_path, "mp_gauge_worker", "0.0.1", "80"))
    worker_said(tmp_path, "mp_gauge_worker", __version__, "50")
    s = parse_exposition(get_multiprocess(tmp_path))
    assert set(only(s, "handoffmon_build_info")) == {L(version="0.0.1"), L(version=__version__)}
    assert only(s, "handoffmon_label_limit")[L(label="model")] == 80
    mark_process_dead(old, str(tmp_path))
    s = parse_exposition(get_multiprocess(tmp_path))
    assert only(s, "handoffmon_build_info") == {L(version=__version__): 1}
    assert only(s, "handoffmon_label_limit")[L(label="model")] == 50


def test_a_workers_refit_covers_every_workers_turns(tmp_path: Path) -> None:
    """The periodic refit of one worker of a multiprocess deployment publishes the deployment's
    refit: its ``handoffmon_handoff_checked_turns`` for a->b counts both workers' handoffs (3 + 2),
    as ``handoffmon_turns_total`` does, not the refitting worker's 2 (a LiteLLM Proxy with two
    workers showed 67 of 120)."""
    worker_said(tmp_path, "mp_refit_worker", "3")
    worker_said(tmp_path, "mp_refit_worker", "2", "refit")
    s = parse_exposition(get_multiprocess(tmp_path))
    assert only(s, "handoffmon_turns_total")[L(model="b", prefix_model="a", depth_bucket="2")] == 5
    checked = only(s, "handoffmon_handoff_checked_turns")
    assert checked[LF(prefix_model="a", model="b", rule="short")] == 5


def test_multiprocess_serves_routing_and_shadow_counters_of_every_worker(tmp_path: Path) -> None:
    """Under PROMETHEUS_MULTIPROC_DIR the routing decisions and shadow counters reach the
    multiprocess ``/metrics``, summed over workers (two real processes on one directory); they were
    read only by scrape-time collectors on each worker's registry, which that ``/metrics`` never
    serves, so they were absent. Two collectors of one process add up too (one file value per series
    and process: two of them overwrite each other's)."""
    counted_by: list[dict[str, Any]] = [
        json.loads(worker_said(tmp_path, "mp_mirror_worker", *args)) for args in (("7", "3"), ("5", "4"))
    ]
    s = parse_exposition(get_multiprocess(tmp_path))
    decisions = only(s, "handoffmon_routing_decisions_total")
    keys = counted_by[0]["routing"]
    assert len(keys) > 2 and len(decisions) == len(keys)  # every (mode, outcome), 0 included
    for key in keys:
        mode, outcome = key.split(",")
        assert decisions[L(mode=mode, outcome=outcome)] == sum(c["routing"][key] for c in counted_by)
    assert decisions[L(mode="dry_run", outcome="reordered")] == 3 + 2
    calls = 3 + 4 + 1 + 1  # each worker's two collectors
    assert only(s, "handoffmon_shadow_calls_total") == {
        L(arm="handoff", outcome="ok"): calls,
        L(arm="no_handoff", outcome="timeout"): 4,
    }
    assert only(s, "handoffmon_shadow_skipped_total") == {L(reason="not_sampled"): 2 * calls}
    assert only(s, "handoffmon_shadow_checks_total") == {L(arm="handoff", verdict="pass"): calls}
    assert only(s, "handoffmon_shadow_pairs_total") == {L(arm="handoff"): calls}
    assert only(s, "handoffmon_shadow_tokens_total") == {L(): 10.0 * calls}
    assert only(s, "handoffmon_shadow_spend_usd_total") == {L(): 0.5 * calls}


def test_file_mirror_writes_a_bounded_number_of_series() -> None:
    """A ``FileMirror`` writes at most ``MAX_MIRRORED_SERIES`` series of its collector, and only
    what each grew by since the last sync (gauges are left out)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    from handoffmon.exporters import serving

    grown = [1.0]

    class Many:
        def collect(self) -> Any:
            family = CounterMetricFamily("test_mirror_bounded", "test", labels=["n"])
            for i in range(serving.MAX_MIRRORED_SERIES + 500):
                family.add_metric([str(i)], grown[0])
            yield family
            yield GaugeMetricFamily("test_mirror_gauge", "test", value=3.0)

    mirror = serving.FileMirror(Many())
    mirror.sync()
    grown[0] = 5.0
    serving.sync_file_mirrors()
    counter = serving._file_counters["test_mirror_bounded"][0]
    values = {
        s.labels["n"]: s.value for m in counter.collect() for s in m.samples if s.name.endswith("_total")
    }
    assert len(values) == serving.MAX_MIRRORED_SERIES
    assert set(values.values()) == {5.0}
    assert "test_mirror_gauge" not in serving._file_counters


def _half_requests(port: int, n: int, host: str = "127.0.0.1") -> list[socket.socket]:
    """``n`` connections that each send a request's first lines and stop (a slowloris client)."""
    held = []
    for _ in range(n):
        with contextlib.suppress(OSError):  # the listen backlog may be full for a moment
            sock = socket.create_connection((host, port), timeout=2)
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            held.append(sock)
    return held


def _server_threads() -> int:
    return sum(
        t.name.startswith("Thread-") and "process_request_thread" in t.name for t in threading.enumerate()
    )


def test_half_sent_requests_hold_a_bounded_number_of_threads_and_scrapes_still_succeed(
    exporter: PrometheusExporter,
) -> None:
    """A client opening 200 connections that never finish their request holds at most
    ``max_connections`` handler threads; a scrape sent meanwhile (plain, gzip, HEAD) is answered,
    and what was closed unserved is counted on the server's own /metrics."""
    registry = exporter.registry
    with start_metrics_server(registry, 0, token="t", max_connections=8, timeout_s=2.0) as server:
        registry.register(server.collector())
        auth = {"Authorization": "Bearer t"}
        held = _half_requests(server.port, 200)
        assert len(held) >= 150
        assert _server_threads() <= 8
        status, body = get(server.url, auth)
        assert status == 200 and "handoffmon_turns_total" in body
        req = urllib.request.Request(server.url, headers={**auth, "Accept-Encoding": "gzip"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert "handoffmon_turns_total" in gzip.decompress(resp.read()).decode()
        req = urllib.request.Request(server.url, headers=auth, method="HEAD")
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.status == 200 and resp.read() == b""
        refused = only(parse_exposition(get(server.url, auth)[1]), "handoffmon_metrics_port_refusals_total")
        assert refused[(("reason", "evicted"),)] >= len(held) - 8
        assert refused[(("reason", "busy"),)] == 0
        for sock in held:
            sock.close()


def test_a_stalled_request_is_closed_after_the_timeout_and_counted(exporter: PrometheusExporter) -> None:
    """A connection that stops mid-request is closed after ``timeout_s`` (the client reads EOF)
    and counted as ``timeout``; its thread is gone."""
    with start_metrics_server(exporter.registry, 0, timeout_s=0.5) as server:
        (sock,) = _half_requests(server.port, 1)
        sock.settimeout(5)
        started = time.monotonic()
        assert sock.recv(1024) == b""
        assert 0.4 < time.monotonic() - started < 3
        deadline = time.monotonic() + 3
        while server.refusals()["timeout"] != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.refusals() == {"busy": 0, "evicted": 0, "timeout": 1}
        # the handler counts the timeout, then its thread ends: wait for that (a loaded CI host
        # saw the count before the thread was gone)
        deadline = time.monotonic() + 5
        while _server_threads() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _server_threads() == 0
        sock.close()


def test_connections_being_answered_are_not_evicted_the_next_is_refused(exporter: PrometheusExporter) -> None:
    """When every slot is answering a request, a new connection is closed at once, counted ``busy``."""
    gate = threading.Event()

    class Slow(Collector):
        def collect(self) -> Iterable[Metric]:
            gate.wait(10)
            return []

    registry = CollectorRegistry()
    registry.register(Slow())
    with start_metrics_server(registry, 0, max_connections=2) as server:
        scrapes = [threading.Thread(target=get, args=(server.url,)) for _ in range(2)]
        for t in scrapes:
            t.start()
        deadline = time.monotonic() + 5
        while _server_threads() < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # both have sent their request and are being answered
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        assert sock.recv(1024) == b""  # closed unserved, without waiting for a slot
        sock.close()
        gate.set()
        for t in scrapes:
            t.join(5)
        assert server.refusals() == {"busy": 1, "evicted": 0, "timeout": 0}


def test_ipv6_server_is_bounded_too(exporter: PrometheusExporter) -> None:
    """The IPv6 listener has the same cap and still answers a scrape past it."""
    try:
        server = start_metrics_server(exporter.registry, 0, "::1", max_connections=4)
    except OSError:
        pytest.skip("no IPv6 loopback")
    with server:
        held = _half_requests(server.port, 20, "::1")
        assert _server_threads() <= 4
        assert get(server.url)[0] == 200
        assert server.refusals()["evicted"] >= len(held) - 4
        for sock in held:
            sock.close()
