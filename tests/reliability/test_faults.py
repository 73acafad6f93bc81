"""Fault matrix under concurrent traffic: the request path stays up and nothing already accepted is lost.

Complements the single-fault tests elsewhere (see docs/operations/reliability.md, the fault matrix):
tests/pipeline/test_monitor.py (raising/failing/hanging exporters and checkers, a broken
store, a full queue, one at a time on a monitor), tests/stores/test_redis.py (Redis
unreachable, hung, back), tests/proxy/test_multi_replica.py (Redis stopped and restarted
behind two serve processes, sequential turns), tests/proxy/test_app.py (504 on an
upstream past its timeout, in-process shutdown drain). Here each fault hits while many
requests are in flight, and "accepted" is counted on the application's side.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from handoffmon.checkers import RuleSet, default_registry
from handoffmon.checkers.base import passed
from handoffmon.config import RuleConfig, config_from_mapping
from handoffmon.counts import Counts
from handoffmon.integrations.router import RouterWrapper
from handoffmon.pipeline.aggregates import load_counts_sqlite
from handoffmon.pipeline.monitor import Monitor
from handoffmon.proxy.app import create_app
from handoffmon.proxy.server import uvicorn_options
from handoffmon.runtime import build_runtime
from handoffmon.testing import RecordingExporter
from tests.conftest import free_port
from tests.integrations.zero_router import ZeroLatencyRouter
from tests.pipeline.helpers import RaisingExporter
from tests.proxy.conftest import proxy_config, running_proxy
from tests.proxy.mock_upstream import ServerThread, reply_text, schedule
from tests.reliability.proxy_traffic import ServeProcess, Traffic, serve_config, upstream_thread
from tests.stores.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]
SHORT = {"name": "short", "check": "length", "params": {"unit": "words", "max": 50}}


def _router() -> ZeroLatencyRouter:
    return ZeroLatencyRouter({"g1": ("dep-1", "openai/m1"), "g2": ("dep-2", "openai/m2")})


async def _conversations(wrapped: Any, tasks: int, turns: int, tag: str, sent: list[int]) -> None:
    """``tasks`` concurrent conversations of ``turns`` turns; each reply checked, counted in ``sent``."""

    async def one(t: int) -> None:
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"{tag} conversation {t}"}]
        for k in range(turns):
            group = "g1" if k % 3 else "g2"
            r = await wrapped.acompletion(model=group, messages=messages)
            assert r.choices[0].message.content == f"reply {len(messages)} by {'dep-1' if k % 3 else 'dep-2'}"
            sent[0] += 1
            messages += [
                {"role": "assistant", "content": r.choices[0].message.content},
                {"role": "user", "content": f"turn {k}"},
            ]
            await asyncio.sleep(0)

    await asyncio.gather(*(one(t) for t in range(tasks)))


def _no_loss(snap: Counts, sent: int) -> None:
    assert snap.total_turns + snap.dropped == sent, (
        f"{snap.total_turns} counted + {snap.dropped} dropped != {sent}"
    )


class KillableRedis(RedisServer):
    """The private redis-server, killable with SIGKILL (no shutdown, no goodbye to clients)."""

    def kill(self) -> None:
        assert self._proc is not None
        self._proc.kill()
        self._proc.wait()
        self._proc = None


async def test_redis_sigkill_and_restart_under_concurrent_wrapper_traffic() -> None:
    """Redis SIGKILLed mid-traffic: calls answered fast, no turn lost; attribution resumes after restart."""
    server = KillableRedis()
    with server:
        store = {"backend": "redis", "url": server.url, "timeout_s": 0.2, "key_prefix": "hm-fault:"}
        m = Monitor(
            config_from_mapping(
                {
                    "rules": [SHORT],
                    "store": store,
                    "refit": {"interval_s": 0},
                    "telemetry": {"log_turns": False},
                }
            )
        )
        wrapped, sent = RouterWrapper(_router(), m), [0]
        await _conversations(wrapped, 8, 6, "before", sent)
        assert m.flush(30)
        assert m.snapshot().attributions.get("unknown", 0) == 0
        server.kill()
        t0 = time.perf_counter()
        await _conversations(
            wrapped, 8, 6, "during", sent
        )  # new conversations: earlier replies only in Redis
        outage_s = time.perf_counter() - t0
        assert m.flush(30)
        during = m.snapshot()
        server.start()
        time.sleep(1.2)  # past the store's back-off: the next call probes Redis again
        await _conversations(wrapped, 8, 6, "after", sent)
        m.close(30)
    snap = m.snapshot()
    _no_loss(snap, sent[0])
    assert sent[0] == 3 * 8 * 6
    # 48 calls during the outage: the store's back-off keeps them from each waiting timeout_s
    assert outage_s < 48 * 0.2 / 2, f"outage phase took {outage_s:.1f}s"
    # after the restart every earlier message is attributed again (new conversations, all in Redis)
    assert snap.attributions.get("unknown", 0) == during.attributions.get("unknown", 0)
    assert snap.attributions["chain"] - during.attributions["chain"] == 8 * sum(range(6))


def _bad_rules() -> RuleSet:
    """A checker that raises on every reply and one that always overruns its 20 ms CPU budget."""
    reg = default_registry()

    def boom(params: Any) -> Any:
        def check(reply: str, ctx: Any) -> Any:
            raise RuntimeError("checker bug")

        return check

    def slow(params: Any) -> Any:
        def check(reply: str, ctx: Any) -> Any:
            end = time.thread_time() + 0.03  # the budget is CPU time: burn it, do not sleep
            while time.thread_time() < end:
                pass
            return passed(True, "")

        return check

    reg.register("boom", boom)
    reg.register("slow", slow)
    rules = [
        RuleConfig(name="boom", check="boom"),
        RuleConfig(name="slow", check="slow"),
        RuleConfig.model_validate(SHORT),
    ]
    return RuleSet.from_config(rules, registry=reg, budget_s=0.02)


async def test_raising_and_over_budget_checkers_under_proxy_traffic() -> None:
    """serve with a raising and an over-budget checker: 64 concurrent requests answered; verdicts
    kept. The raising checker is the monitor's failure; the over-budget one a limit at work (an
    ``error`` verdict, not a monitor error): both shown by reason."""
    registry = CollectorRegistry()
    with upstream_thread() as (url, _):
        config = proxy_config(url)
        rt = build_runtime(config, registry=registry, rules=_bad_rules())
        m = rt.monitor
        app = create_app(config, runtime=rt)
        with ServerThread(app, free_port(), **uvicorn_options(config)) as srv:
            async with httpx.AsyncClient(base_url=srv.url, timeout=30) as client:

                async def ask(i: int) -> str:
                    body = {"model": "g", "messages": [{"role": "user", "content": f"q{i}"}]}
                    r = await client.post("/v1/chat/completions", json=body)
                    assert r.status_code == 200
                    return str(r.json()["choices"][0]["message"]["content"])

                replies = await asyncio.gather(*(ask(i) for i in range(64)))
        assert m.flush(30)
        sample = registry.get_sample_value
        reasons = {
            (rule, reason): sample("handoffmon_check_errors_total", {"rule": rule, "reason": reason})
            for rule, reason in (("boom", "raised"), ("slow", "over_budget"), ("boom", "over_budget"))
        }
        rt.close(30)
    assert replies == [reply_text(schedule(1), 1)] * 64
    snap = m.snapshot()
    _no_loss(snap, 64)
    verdicts: dict[tuple[str, str], int] = {}
    for key, n in snap.checks.items():
        verdicts[(key.rule, key.verdict)] = verdicts.get((key.rule, key.verdict), 0) + n
    assert verdicts == {("boom", "error"): 64, ("slow", "error"): 64, ("short", "pass"): 64}
    assert snap.monitor_errors == {"check": 64}
    assert reasons == {("boom", "raised"): 64, ("slow", "over_budget"): 64, ("boom", "over_budget"): None}


SLOW_S = 3.0
"""The slow upstream's delay: long enough that 20 fast requests fit in it on a loaded CI host."""


async def test_slow_upstream_holds_up_neither_other_requests_nor_monitoring() -> None:
    """8 requests answered after 3 s in flight: 20 fast requests meanwhile return at once; 28 counted."""
    with upstream_thread() as (url, _), running_proxy(proxy_config(url)) as p:
        async with httpx.AsyncClient(base_url=p.url, timeout=30) as client:

            async def ask(i: int, delay: float) -> float:
                body = {"model": "g", "messages": [{"role": "user", "content": f"slow test {delay} {i}"}]}
                t0 = time.perf_counter()
                r = await client.post(
                    "/v1/chat/completions", json=body, headers={"x-mock-delay-s": str(delay)}
                )
                assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
                return time.perf_counter() - t0

            slow = [asyncio.create_task(ask(i, SLOW_S)) for i in range(8)]
            await asyncio.sleep(0.2)
            fast = [await ask(i, 0.0) for i in range(20)]
            still_waiting = sum(not t.done() for t in slow)
            slow_s = await asyncio.gather(*slow)
        assert still_waiting == 8, "the fast requests did not overlap the slow ones"
        assert min(slow_s) >= SLOW_S
        # sequential fast requests finished while the slow ones were still waiting upstream
        assert sum(fast) < SLOW_S, f"20 fast requests took {sum(fast):.2f}s behind slow ones"
        assert p.monitor.flush(30)
        snap = p.monitor.snapshot()
    _no_loss(snap, 28)
    assert snap.total_turns == 28


def _dead_otlp_exporter(port: int) -> Any:
    """handoffmon's OTel exporter on a real SDK whose OTLP/HTTP span exporter points at a closed port."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from handoffmon.exporters.otel import OTelExporter

    tp = TracerProvider()
    otlp = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces", timeout=1)
    tp.add_span_processor(BatchSpanProcessor(otlp, schedule_delay_millis=50, export_timeout_millis=1000))
    mp = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return OTelExporter(tracer_provider=tp, meter_provider=mp, span="own"), tp


async def test_failing_exporters_under_wrapper_traffic() -> None:
    """OTLP collector down, an exporter that raises: calls unaffected, every turn counted, close bounded."""
    dead_port = free_port()  # nothing listens there
    otel, tp = _dead_otlp_exporter(dead_port)
    good = RecordingExporter()
    m = Monitor(
        config_from_mapping(
            {"rules": [SHORT], "telemetry": {"log_turns": False}, "pipeline": {"shutdown_timeout_s": 5}}
        ),
        exporters=[otel, RaisingExporter(), good],
    )
    wrapped, sent = RouterWrapper(_router(), m), [0]
    t0 = time.perf_counter()
    await _conversations(wrapped, 8, 25, "exporters", sent)
    traffic_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    m.close()
    close_s = time.perf_counter() - t0
    tp.shutdown()
    snap = m.snapshot()
    _no_loss(snap, sent[0])
    assert sent[0] == 200 and len(good.results) == 200
    assert snap.monitor_errors.get("export", 0) >= 200  # the raising exporter, once per turn
    assert close_s < 5 + 2, f"close took {close_s:.1f}s with a dead collector"
    assert traffic_s < 10


APP = textwrap.dedent(
    """
    import json, os, signal, sys, time
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    from handoffmon.checkers import RuleSet, default_registry
    from handoffmon.checkers.base import passed
    from handoffmon.config import RuleConfig, config_from_mapping
    from handoffmon.integrations.router import RouterWrapper
    from handoffmon.pipeline.monitor import Monitor
    from tests.integrations.zero_router import ZeroLatencyRouter

    reg = default_registry()
    reg.register("slowish", lambda p: lambda reply, ctx: (time.sleep(0.002), passed(True, ""))[1])
    rules = RuleSet.from_config([RuleConfig(name="slowish", check="slowish")], registry=reg, budget_s=1.0)
    cfg = config_from_mapping({"store": {"backend": "sqlite", "path": sys.argv[1]},
                               "pipeline": {"shutdown_timeout_s": 120, "queue_size": 100000,
                                            "attribution_queue_size": 100000},
                               "telemetry": {"log_turns": False}, "refit": {"interval_s": 0}})
    monitor = Monitor(cfg, rules=rules)
    client = RouterWrapper(ZeroLatencyRouter({"g": ("dep-1", "openai/m1")}), monitor)
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))  # the usual graceful-stop flag
    sent, c = 0, 0
    while not stop:
        messages = [{"role": "user", "content": f"conversation {c}"}]
        for k in range(5):
            r = client.completion(model="g", messages=messages)
            sent += 1
            messages += [{"role": "assistant", "content": r.choices[0].message.content},
                         {"role": "user", "content": f"turn {k}"}]
            if sent == 200:
                print("warm", flush=True)
        c += 1
    print(json.dumps({"sent": sent, "pending": monitor.stats["pending"]}), flush=True)
    # no explicit close: the interpreter exits and handoffmon's atexit hook drains the queue
    """
)


@pytest.mark.slow  # ~50 s: a backlog of thousands of turns is built up, then drained
@pytest.mark.exclusive
def test_sigterm_during_wrapper_traffic_drains_the_backlog_into_sqlite(tmp_path: Path) -> None:
    """An app SIGTERMed with a backlog queued: at exit every returned turn is in the SQLite aggregates."""
    script, db = tmp_path / "app.py", tmp_path / "hm.db"
    script.write_text(APP)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "warm"
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-2000:]
    report = json.loads(out.strip().splitlines()[-1])
    assert report["pending"] > 0, "no backlog at SIGTERM: the drain was not exercised"
    counts = load_counts_sqlite(db)
    _no_loss(counts, report["sent"])
    assert counts.dropped == 0
    assert sum(counts.checks.values()) == report["sent"]


async def test_sigterm_during_proxy_traffic_keeps_every_answered_turn(tmp_path: Path) -> None:
    """serve (SQLite store) SIGTERMed under 8 concurrent clients: SQLite aggregates == answered turns."""
    db = tmp_path / "serve.db"
    with upstream_thread() as (url, _):
        serve = ServeProcess(serve_config({"backend": "sqlite", "path": str(db)}), url, tmp_path)
        try:
            serve.wait_ready()
            traffic = Traffic(f"{serve.url}/v1/chat/completions", concurrency=8, seed=3)
            stop = asyncio.Event()
            task = asyncio.create_task(traffic.run(stop))
            while traffic.ok < 300:
                await asyncio.sleep(0.05)
            serve.proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.5)  # clients keep sending while it drains; refused requests fail
            stop.set()
            await task
            status = serve.proc.wait(timeout=60)
        finally:
            serve.stop()
    assert status in (0, -signal.SIGTERM)
    assert "Traceback" not in serve.stderr.read_text()
    counts = load_counts_sqlite(db)
    _no_loss(counts, traffic.ok)
    assert sum(counts.checks.values()) == 3 * traffic.ok


@pytest.fixture(autouse=True)
def _litellm_cost_map() -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
