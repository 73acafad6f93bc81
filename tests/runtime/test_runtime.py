"""The Runtime: built from config, shown in the app's registry, served on metrics_port, refit, closed."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from handoffmon.errors import ConfigError, HandoffmonError
from handoffmon.runtime import Runtime, build_runtime, shared_runtime
from tests.pipeline.helpers import RecordingExporter, make_config, run_conversation, runtime
from tests.sources.replica import synthetic_turns


def _wait(cond: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_series_appear_in_the_application_registry_and_leave_at_close() -> None:
    """build_runtime(registry=app) shows handoffmon's families in app; close() unregisters them."""
    app = CollectorRegistry()
    rt = runtime(make_config(telemetry={"log_turns": False}), registry=app)
    run_conversation(rt.monitor, ["a", "b"])
    assert rt.flush(10)
    labels = {"model": "b", "prefix_model": "a", "depth_bucket": "2"}
    assert app.get_sample_value("handoffmon_turns_total", labels) == 1.0
    assert app.get_sample_value("handoffmon_turns_total", labels) == rt.registry.get_sample_value(
        "handoffmon_turns_total", labels
    )
    filtered = generate_latest(app.restricted_registry(["handoffmon_turns_total"])).decode()
    assert 'handoffmon_turns_total{depth_bucket="2",model="b",prefix_model="a"} 1.0' in filtered
    rt.close()
    assert app.get_sample_value("handoffmon_turns_total", labels) is None
    assert rt.closed and rt.monitor.closed


def test_second_runtime_in_one_registry_is_refused_with_the_fix_named() -> None:
    """Two runtimes cannot show their series in one registry: the second fails before starting threads."""
    app = CollectorRegistry()
    with runtime(registry=app), pytest.raises(HandoffmonError, match="share that runtime"):
        runtime(registry=app)


def test_shared_runtime_is_one_per_registry_and_config() -> None:
    """shared_runtime: same config → the same object; another config → ConfigError; closed → rebuilt."""
    app = CollectorRegistry()
    cfg = make_config(refit={"interval_s": 0})
    first = shared_runtime(cfg, registry=app)
    try:
        assert shared_runtime(make_config(refit={"interval_s": 0}), registry=app) is first
        with pytest.raises(ConfigError, match="different configuration"):
            shared_runtime(make_config(refit={"interval_s": 5}), registry=app)
        first.close()
        second = shared_runtime(cfg, registry=app)
        assert second is not first and not second.closed
        second.monitor.close()  # closing only the monitor (older docs said so) retires the runtime too
        third = shared_runtime(make_config(refit={"interval_s": 5}), registry=app)
        assert second.closed and not third.closed
        third.close()
    finally:
        first.close()


def test_periodic_refit_is_scheduled_by_the_runtime_and_publishes_gauges() -> None:
    """refit.interval_s > 0: the runtime's refit thread publishes the refit gauges; close() stops it."""
    config = make_config(refit={"interval_s": 1, "min_n": 1}, telemetry={"log_turns": False})
    rt = runtime(config)
    try:
        for i in range(6):
            run_conversation(rt.monitor, ["a", "a", "b", "b"], user=f"user {i}")
        assert rt.flush(10)
        assert rt.refit is not None and rt.refit.running
        _wait(lambda: rt.refit is not None and rt.refit.stats.runs > 0)
        assert rt.refit.stats.failures == 0, rt.refit.stats.last_error
        assert (
            rt.registry.get_sample_value("handoffmon_refit_last_success_timestamp_seconds", {"fit": "local"})
            == rt.refit.stats.last_success_at
        )
    finally:
        rt.close()
    assert not rt.refit.running


def test_refit_of_real_counts_fills_the_influence_gauges() -> None:
    """refit_now() refits the monitor's aggregates with its config and publishes π to Prometheus."""
    config = make_config(refit={"interval_s": 30, "min_n": 10}, telemetry={"log_turns": False})
    with runtime(config, clock=lambda: 50.0, start=False) as rt:
        for turn in synthetic_turns(7, 2000):
            rt.monitor.aggregates.add_turn(turn)
        result = rt.refit_now()
        assert result is not None and result.min_n == 10
        pi = result.rules["all"].models["m1"].prefix_influence
        assert rt.registry.get_sample_value(
            "handoffmon_prefix_influence", {"model": "m1", "rule": "all", "fit": "local"}
        ) == pytest.approx(pi)
        assert (
            rt.registry.get_sample_value("handoffmon_refit_last_success_timestamp_seconds", {"fit": "local"})
            == 50.0
        )


def test_no_refit_schedule_when_disabled() -> None:
    """refit.interval_s = 0: no refit thread, refit_now() returns None."""
    with runtime(make_config(refit={"interval_s": 0})) as rt:
        assert rt.refit is None and rt.refit_now() is None


def test_failed_refit_counts_a_refit_error() -> None:
    """A refit whose publisher fails counts monitor_errors{stage="refit"} (exported like any stage)."""

    class BrokenGauges(RecordingExporter):
        def publish_refit(self, result: object) -> bool:
            return False

    config = make_config(refit={"interval_s": 60}, telemetry={"log_turns": False})
    with runtime(config, exporters=[BrokenGauges()]) as rt:
        run_conversation(rt.monitor, ["a"])  # a checked turn: a refit of no checks publishes nothing
        assert rt.flush(10)
        assert rt.refit_now() is None
        assert rt.monitor.snapshot().monitor_errors == {"refit": 1}
        assert rt.registry.get_sample_value("handoffmon_monitor_errors_total", {"stage": "refit"}) == 1.0


def test_metrics_port_serves_the_series_with_the_bearer_token() -> None:
    """telemetry.metrics_port (0 = any free port) serves /metrics on loopback, guarded by metrics_token."""
    config = make_config(telemetry={"metrics_port": 0, "metrics_token": "s3cret", "log_turns": False})
    with runtime(config) as rt:
        run_conversation(rt.monitor, ["a"])
        assert rt.flush(10)
        server = rt.metrics_server
        assert server is not None and server.addr == "127.0.0.1"
        assert httpx.get(server.url).status_code == 401
        r = httpx.get(server.url, headers={"authorization": "Bearer s3cret"})
        assert r.status_code == 200
        assert 'handoffmon_turns_total{depth_bucket="1",model="a",prefix_model="none"} 1.0' in r.text
        url = server.url
    with pytest.raises(httpx.HTTPError):
        httpx.get(url, timeout=1)


def test_metrics_port_taken_fails_fast_naming_the_key() -> None:
    """A port that cannot be bound is a ConfigError naming telemetry.metrics_port; nothing keeps running."""
    with runtime(make_config(telemetry={"metrics_port": 0})) as first:
        assert first.metrics_server is not None
        taken = first.metrics_server.port
        before = set(threading.enumerate())
        with pytest.raises(ConfigError, match=r"telemetry\.metrics_port"):
            runtime(make_config(telemetry={"metrics_port": taken}))
        time.sleep(0.1)  # threads of the failed runtime would still be alive: close() joins them
        leaked = [t.name for t in set(threading.enumerate()) - before if t.name.startswith("handoffmon")]
        assert leaked == []


def test_close_drains_queued_turns_and_is_idempotent() -> None:
    """Turns queued before start are processed by close(); a second close() is a no-op."""
    exp = RecordingExporter()
    rt = build_runtime(make_config(), registry=None, exporters=[exp], start=False)
    assert isinstance(rt, Runtime) and not rt.started
    run_conversation(rt.monitor, ["a", "a", "b"])
    rt.start()
    rt.close()
    rt.close()
    assert len(exp.results) == 3 and exp.shut
    assert rt.monitor.snapshot().total_turns == 3


def test_a_redis_down_at_start_starts_degraded_and_counted_from_the_first_scrape() -> None:
    """Nothing showed a dead Redis until the first request failed on it: now the start probes it,
    warns, counts the failure and reports the store failing open (what /readyz shows)."""
    cfg = make_config(store={"backend": "redis", "url": "redis://127.0.0.1:1/0", "timeout_s": 0.05})
    started = time.monotonic()
    rt = build_runtime(cfg, registry=None)
    try:
        assert time.monotonic() - started < 5  # no hang on the dead store
        assert rt.started and not rt.monitor.store.healthy
        reg = rt.registry
        assert reg.get_sample_value("handoffmon_monitor_errors_total", {"stage": "store"}) == 1.0
        assert reg.get_sample_value("handoffmon_store_failures_total", {"op": "get", "kind": "errors"}) == 1.0
        run_conversation(rt.monitor, ["a", "b"])  # fail-open: requests still go through
        assert rt.flush(10)
    finally:
        rt.close()


def test_a_redis_that_refuses_at_start_fails_open_with_the_reason_in_the_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Redis that answers but refuses (a database index past ``databases``, a wrong password)
    was reported as one that "does not answer at start": the operator looked at the network
    while the URL was wrong. It still fails open (the server may be reconfigured; monitoring
    never stops the application), and the warning now says why."""
    from tests.conftest import require_redis

    require_redis()
    cfg = make_config(store={"backend": "redis", "url": "redis://127.0.0.1:6379/999", "timeout_s": 1.0})
    with caplog.at_level("WARNING", logger="handoffmon.runtime"):
        rt = build_runtime(cfg, registry=None)
    try:
        assert rt.started and not rt.monitor.store.healthy
        failures = {"op": "get", "kind": "errors"}
        assert rt.registry.get_sample_value("handoffmon_store_failures_total", failures) == 1.0
        assert "DB index is out of range" in caplog.text, caplog.text
    finally:
        rt.close()


@pytest.mark.parametrize("text", ["", "# store: {backend: redis}\n", "null\n", "---\n"])
def test_a_config_file_that_sets_nothing_is_warned_about_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    """A config file rendered empty (a template whose values were missing, a ConfigMap mounted
    as an empty file) is valid YAML: the monitor started on every default (the memory store,
    no configured rule) without a word, where ``config check`` warns. Now the start warns
    too, naming the file; it still starts (the defaults are a working monitor)."""
    from handoffmon.config import load_config

    f = tmp_path / "handoffmon.yaml"
    f.write_text(text)
    with caplog.at_level("WARNING", logger="handoffmon.runtime"):
        rt = build_runtime(load_config(f, environ={}), registry=None)
    rt.close()
    assert rt.config.empty_file == str(f)
    assert f"{f} sets nothing (empty or null)" in caplog.text, caplog.text
    caplog.clear()
    env = {"HANDOFFMON_PIPELINE__WORKERS": "2"}  # the file still sets nothing: named alone
    with caplog.at_level("WARNING", logger="handoffmon.runtime"):
        build_runtime(load_config(f, environ=env), registry=None).close()
    assert f"config file {f} sets nothing" in caplog.text, caplog.text
    caplog.clear()
    f.write_text("store: {backend: memory}\n")
    with caplog.at_level("WARNING", logger="handoffmon.runtime"):
        build_runtime(load_config(f, environ={}), registry=None).close()
        build_runtime(make_config(), registry=None).close()
    assert "sets nothing" not in caplog.text


def test_a_redis_down_at_start_is_used_once_it_comes_up_without_a_restart() -> None:
    """Redis not yet up when the application starts (a compose stack starting in any order):
    the runtime starts failing open, and once Redis listens the first call past
    ``store.backoff_s`` uses it, also after traffic during the outage opened the breaker: the
    store is healthy again, a conversation's second turn is attributed by chain, and nothing
    more is counted as failed."""
    from tests.stores.redis_server import RedisServer

    server = RedisServer()
    cfg = make_config(store={"backend": "redis", "url": server.url, "timeout_s": 0.5, "backoff_s": 0.2})
    exp = RecordingExporter()
    rt = build_runtime(cfg, registry=None, exporters=[exp])
    try:
        assert not rt.monitor.store.healthy
        for i in range(3):  # traffic while it is down: the breaker opens
            run_conversation(rt.monitor, ["a", "b"], user=f"while down {i}")
            assert rt.flush(10)
        assert not rt.monitor.store.available
        server.start()
        time.sleep(0.3)  # past store.backoff_s
        stats = rt.monitor.store.stats()
        run_conversation(rt.monitor, ["a", "b"])
        assert rt.flush(10) and rt.monitor.store.healthy
        assert [a.method for a in exp.results[-1].context.attributions] == ["chain"]
        assert rt.monitor.store.stats() == stats  # nothing failed once it was up
    finally:
        rt.close()
        server.stop()


def test_a_healthy_store_is_not_counted_at_start() -> None:
    rt = build_runtime(make_config(store={"backend": "memory"}), registry=None)
    try:
        assert rt.monitor.store.healthy
        assert rt.registry.get_sample_value("handoffmon_monitor_errors_total", {"stage": "store"}) == 0.0
    finally:
        rt.close()


def test_start_after_close_is_refused_not_a_silent_dead_runtime() -> None:
    """A closed runtime's start() returned it as if running: its monitor recorded nothing."""
    rt = build_runtime(make_config(), registry=None)
    rt.start()  # a second start is a no-op
    rt.close()
    rt.close()  # and so is a second close
    with pytest.raises(HandoffmonError, match="closed"):
        rt.start()


@pytest.mark.parametrize("host", ["256.1.1.1", "no-such-host.invalid", "192.0.2.1"])
def test_a_metrics_host_that_is_no_address_here_fails_naming_that_key_and_the_file(
    host: str, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """A typo'd or foreign telemetry.metrics_host blamed telemetry.metrics_port (and named no file):
    the operator changed the port and got the same error."""
    from handoffmon.config import load_config

    f = tmp_path / "h.yaml"
    f.write_text(f"telemetry:\n  metrics_port: 0\n  metrics_host: {host}\nrefit:\n  interval_s: 0\n")
    with pytest.raises(ConfigError) as exc:
        build_runtime(load_config(f, environ={}), registry=None)
    assert exc.value.key == "telemetry.metrics_host" and str(f) in str(exc.value), str(exc.value)


def test_a_bare_monitor_names_store_path_and_the_file_for_a_missing_directory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``Monitor(config)`` used directly (not through ``build_runtime``) with a SQLite
    ``store.path`` in a missing directory raised the store's raw ``MissingDirectory`` (after its
    aggregates had tried the same path and warned they count in memory); it now fails as
    ``build_runtime`` does: a ``ConfigError`` naming ``store.path`` and the config file, before
    anything opens, and nothing created."""
    from handoffmon.config import load_config
    from handoffmon.pipeline.monitor import Monitor

    missing = tmp_path / "typo" / "h.db"
    cfg = tmp_path / "h.yaml"
    cfg.write_text(f"store:\n  backend: sqlite\n  path: {missing}\n")
    config = load_config(cfg, environ={})
    with pytest.raises(ConfigError) as exc:
        Monitor(config, start=False)
    assert exc.value.key == "store.path" and exc.value.source == str(cfg), str(exc.value)
    assert str(missing.parent) in str(exc.value)
    assert not missing.parent.exists()
    assert "cannot open aggregates" not in caplog.text
    with pytest.raises(ConfigError) as again:
        build_runtime(config, registry=None)
    assert str(again.value) == str(exc.value)
